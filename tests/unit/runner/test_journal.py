"""The undo journal: its whole lifecycle (record, undone, close; open changes newest first;
`gameday cleanup`'s mark_undone and close_journals), the file it writes record by record, and
records of older versions."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from runner.errors import LabError
from runner.labs.base import Change, ChangeKind, NodeConfig, ProcessState, Value
from runner.run import journal as journal_module
from runner.run.journal import Journal, OpenChange, close_journals, mark_undone, open_changes

# a record as the first version wrote it: states without a `type` tag
OLD = {
    "op": "change",
    "seq": 1,
    "run": "r0",
    "scenario": "kv-cache-shortage",
    "change": {
        "kind": "node_config",
        "node": "serving",
        "before": {"args": ["m", "--max-model-len", "4096"], "env": {}},
        "after": {"args": ["m", "--max-model-len", "16384"], "env": {}},
        "note": "",
    },
    "ts": "2026-11-29T07:44:08+00:00",
}


def test_reads_records_of_the_first_version(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "r0.jsonl").write_text(json.dumps(OLD) + "\n")
    [item] = open_changes(tmp_path)
    assert item.change.before == NodeConfig(args=("m", "--max-model-len", "4096"), env={})


def test_closed_and_undone_need_nothing(tmp_path: Path) -> None:
    j = Journal(tmp_path, "r1")
    c = Change(
        kind=ChangeKind.NODE_CONFIG,
        node="n",
        before=NodeConfig(args=("a",), env={}),
        after=NodeConfig(args=("b",), env={}),
    )
    seq = j.record("s", c)
    assert [x.seq for x in open_changes(tmp_path)] == [seq]
    assert (tmp_path / "journal" / "r1.jsonl").stat().st_mode & 0o077 == 0  # owner-only
    j.undone(seq)
    j.close()
    assert open_changes(tmp_path) == []


def test_unreadable_record_is_one_message(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    bad = {**OLD, "change": {"kind": "teleport", "node": "n", "before": {}, "after": {}}}
    (tmp_path / "journal" / "r2.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(LabError) as err:
        open_changes(tmp_path)
    assert err.value.message == (
        f"{tmp_path}/journal/r2.jsonl: journal record 1 cannot be read by this version of gameday "
        "(3 problem(s), first: Input should be 'node_config', 'process', 'address' or "
        "'scrape_targets')"
    )
    assert err.value.hint == "check the lab by hand, then move the journal file out of the way"


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        # a state tagged with its type is read as that type, never guessed over
        (
            {
                "kind": "node_config",
                "node": "n",
                "before": {"type": "value", "args": ["m"], "env": {}},
                "after": {"type": "value", "value": "x"},
            },
            "3 problem(s), first: Field required",
        ),
        (
            {"kind": "process", "node": "n", "after": {"running": True}},
            "1 problem(s), first: Field required",
        ),
    ],
)
def test_records_that_cannot_be_read(
    tmp_path: Path, change: dict[str, object], problems: str
) -> None:
    (tmp_path / "journal").mkdir()
    (tmp_path / "journal" / "r4.jsonl").write_text(json.dumps({**OLD, "change": change}) + "\n")
    with pytest.raises(LabError) as err:
        open_changes(tmp_path)
    assert err.value.message.endswith(f"cannot be read by this version of gameday ({problems})")


def test_a_record_without_scenario(tmp_path: Path) -> None:
    (tmp_path / "journal").mkdir()
    rec = {k: v for k, v in OLD.items() if k != "scenario"}
    (tmp_path / "journal" / "r5.jsonl").write_text(json.dumps(rec) + "\n")
    [item] = open_changes(tmp_path)
    assert (item.seq, item.scenario) == (1, "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.seq = 2  # type: ignore[misc]


def node_change(before: str, after: str) -> Change:
    return Change(
        kind=ChangeKind.NODE_CONFIG,
        node="serving",
        before=NodeConfig(args=("m", before), env={}),
        after=NodeConfig(args=("m", after), env={"K": "v"}),
    )


A = node_change("a0", "a1")
B = Change(
    kind=ChangeKind.PROCESS,
    node="serving",
    subject="stray",
    before=ProcessState(running=False),
    after=ProcessState(running=True, command=("stray", "--gib", "3")),
)
C = Change(
    kind=ChangeKind.ADDRESS,
    node="router",
    subject="net0",
    before=Value(value="10.0.0.5"),
    after=Value(value="10.0.0.6"),
    note="moved",
)


def records(path: Path, skip: int = 0) -> list[dict[str, object]]:
    """The journal's records after the first `skip` lines, without their time stamps (checked
    apart)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[skip:]:
        rec = json.loads(line)
        ts = rec.pop("ts")
        assert isinstance(ts, str) and ts.endswith("+00:00")
        out.append(rec)
    return out


def test_lifecycle_of_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    monkeypatch.setattr(journal_module, "fsync_dir", synced.append)
    j = Journal(tmp_path, "run1")
    path = tmp_path / "journal" / "run1.jsonl"
    assert (j.dir, j.path, j.run_id) == (tmp_path / "journal", path, "run1")
    assert (tmp_path / "journal").stat().st_mode & 0o777 == 0o700
    assert [j.record("s1", A), j.record("s1", B), j.record("s2", C)] == [1, 2, 3]
    assert path.stat().st_mode & 0o777 == 0o600
    assert synced == [tmp_path / "journal"]  # the file's name is synced once, when created
    got = open_changes(tmp_path)
    assert got == [
        OpenChange(path, 3, "s2", C),
        OpenChange(path, 2, "s1", B),
        OpenChange(path, 1, "s1", A),
    ]  # newest first: the order to undo them in
    j.undone(2)
    assert open_changes(tmp_path) == [OpenChange(path, 3, "s2", C), OpenChange(path, 1, "s1", A)]
    j.undone(3)
    j.undone(1)
    assert open_changes(tmp_path) == []
    j.close()
    assert records(path) == [
        {
            "op": "change",
            "seq": 1,
            "run": "run1",
            "scenario": "s1",
            "change": {
                "kind": "node_config",
                "node": "serving",
                "subject": "",
                "before": {
                    "type": "node_config",
                    "args": ["m", "a0"],
                    "env": {},
                    "service_links": None,
                },
                "after": {
                    "type": "node_config",
                    "args": ["m", "a1"],
                    "env": {"K": "v"},
                    "service_links": None,
                },
                "note": "",
            },
        },
        {
            "op": "change",
            "seq": 2,
            "run": "run1",
            "scenario": "s1",
            "change": {
                "kind": "process",
                "node": "serving",
                "subject": "stray",
                "before": {"type": "process", "running": False, "command": []},
                "after": {"type": "process", "running": True, "command": ["stray", "--gib", "3"]},
                "note": "",
            },
        },
        {
            "op": "change",
            "seq": 3,
            "run": "run1",
            "scenario": "s2",
            "change": {
                "kind": "address",
                "node": "router",
                "subject": "net0",
                "before": {"type": "value", "value": "10.0.0.5"},
                "after": {"type": "value", "value": "10.0.0.6"},
                "note": "moved",
            },
        },
        {"op": "undone", "seq": 2},
        {"op": "undone", "seq": 3},
        {"op": "undone", "seq": 1},
        {"op": "closed"},
    ]
    assert synced == [tmp_path / "journal"]


def test_cleanup_of_an_interrupted_run(tmp_path: Path) -> None:
    """What `gameday cleanup` does after a kill: undo newest first, mark each, close."""
    assert open_changes(tmp_path) == []  # no journal directory at all
    close_journals(tmp_path)
    assert not (tmp_path / "journal").exists()
    first, second = Journal(tmp_path, "r1"), Journal(tmp_path, "r2")
    first.record("s", A)
    first.record("s", B)
    second.record("t", C)
    p1, p2 = first.path, second.path
    with p1.open("a", encoding="utf-8") as f:
        f.write('{"op": "undone", "se')  # torn by a kill mid-write: never applied
    items = open_changes(tmp_path)
    # journals in name order, each newest first
    assert items == [
        OpenChange(p1, 2, "s", B),
        OpenChange(p1, 1, "s", A),
        OpenChange(p2, 1, "t", C),
    ]
    mark_undone(items[0])
    assert open_changes(tmp_path) == items[1:]
    for item in items[1:]:
        mark_undone(item)
    assert open_changes(tmp_path) == []
    second.close()
    close_journals(tmp_path)
    close_journals(tmp_path)  # closing twice adds nothing
    assert p1.read_text(encoding="utf-8").splitlines()[2] == '{"op": "undone", "se'
    assert records(p1, skip=3) == [
        {"op": "undone", "seq": 2},
        {"op": "undone", "seq": 1},
        {"op": "closed"},
    ]
    assert records(p2, skip=1) == [{"op": "undone", "seq": 1}, {"op": "closed"}]
    assert (p1.stat().st_mode & 0o777, p2.stat().st_mode & 0o777) == (0o600, 0o600)


def test_closed_journal_with_a_change_left_open(tmp_path: Path) -> None:
    """A run whose own undo failed closes its journal all the same: the change stays open."""
    j = Journal(tmp_path, "r3")
    j.record("s", A)
    j.record("s", B)
    j.undone(2)
    j.close()
    assert open_changes(tmp_path) == [OpenChange(j.path, 1, "s", A)]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"args": ["x"], "env": {}}, NodeConfig(args=("x",), env={})),
        ({"running": True}, ProcessState(running=True)),
        ({"value": "10.0.0.5"}, Value(value="10.0.0.5")),
    ],
)
def test_old_states_get_their_type(
    tmp_path: Path, state: dict[str, object], expected: object
) -> None:
    (tmp_path / "journal").mkdir()
    old = {**OLD, "change": {"kind": "process", "node": "n", "before": state, "after": state}}
    (tmp_path / "journal" / "r0.jsonl").write_text(json.dumps(old) + "\n")
    [item] = open_changes(tmp_path)
    assert (item.seq, item.scenario, item.change.before, item.change.after) == (
        1,
        "kv-cache-shortage",
        expected,
        expected,
    )
