"""The undo journal across versions: old records are read, unreadable ones give one message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import LabError
from runner.journal import Journal, open_changes
from runner.labs.base import Change, ChangeKind, NodeConfig

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
    with pytest.raises(LabError, match=r"r2\.jsonl: journal record 1 cannot be read"):
        open_changes(tmp_path)
