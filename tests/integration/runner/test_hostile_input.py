"""Hostile input to the loaders: malformed, truncated, deeply nested, huge and type-confused
scenario and inventory files. Never a traceback: each case states whether the file must be
refused (an InputError naming the file, and the field or line where there is one) or accepted
(with the value it holds)."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import InputError
from runner.spec.inventory_load import load_inventory
from runner.spec.scenario import load_scenario
from tests.support.results import run_result, scenario_result

ROOT = Path(__file__).resolve().parents[3]


INVENTORY = ROOT / "inventories" / "local.yaml"


CWO = ROOT / "scenarios" / "context-window-overflow.yaml"


HEAD = ROOT / "scenarios" / "head-only-restart.yaml"


CWO_TITLE = "title: max-model-len above the model's context window (the first wall)"


def gameday(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def assert_input_error(proc: subprocess.CompletedProcess[str], *named: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for what in named:
        assert what in proc.stderr, proc.stderr


def edited(tmp_path: Path, src: Path, old: str, new: str, name: str = "s.yaml") -> Path:
    text = src.read_text()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1))
    return p


def test_5000_digit_integer(tmp_path: Path) -> None:
    big = "9" * 5000
    sc = edited(tmp_path, CWO, "max_s: 30}", f"max_s: {big}}}")
    assert_input_error(gameday("validate", str(sc)), f"{sc}:43")
    inv = edited(tmp_path, INVENTORY, "gameday_port: 8000", f"gameday_port: {big}", "i.yaml")
    assert_input_error(gameday("validate", str(inv)), f"{inv}:33")
    assert_input_error(gameday("list", str(sc)), f"{sc}:43")


def test_date_like_values(tmp_path: Path) -> None:
    # a title is text, whatever it looks like
    sc = edited(tmp_path, CWO, CWO_TITLE, "title: 2001-13-45")
    proc = gameday("list", "--json", str(sc))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["title"] == "2001-13-45"
    # where a number belongs, a date is an error at its line
    sc = edited(tmp_path, CWO, "max_s: 30}", "max_s: 2001-13-45}")
    assert_input_error(gameday("validate", str(sc)), f"{sc}:43", "time_to_fail")


def test_markup_in_titles_and_file_names(tmp_path: Path) -> None:
    d = tmp_path / "x[" / "]y"
    d.mkdir(parents=True)
    sc = edited(d, CWO, CWO_TITLE, 'title: "[/] [bold]x"', "s[/].yaml".replace("/", "_"))
    sc = sc.rename(d / "s.yaml")
    proc = gameday("list", str(sc))
    assert proc.returncode == 0, proc.stderr
    assert "[/] [bold]x" in proc.stdout
    log = d / "l[/].log".replace("/", "")
    log.write_text(
        "User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=32768.0) [/]\n"
    )
    proc = gameday("triage", str(log), "--scenarios", str(sc))
    assert proc.returncode == 0, proc.stderr
    assert f"{log}: context-window-overflow - [/] [bold]x" in proc.stdout
    proc = gameday("timeline", str(log))
    assert proc.returncode == 0, proc.stderr
    log.write_text("2026-01-01T00:00:00Z hello [/]\n")
    proc = gameday("timeline", str(log))
    assert proc.returncode == 0, proc.stderr
    assert f"{log} [stamped] 2026-01-01T00:00:00Z hello [/]" in proc.stdout


def test_markup_in_a_result(tmp_path: Path) -> None:
    from runner.results.schema import LabInfo, Verdict

    sc = scenario_result(
        "[/]", id="s[/]1", file="[/]", lab="[/]", verdict=Verdict.PASSED, time_to_fail_s=None,
        assertions=[], timeline=[], evidence=[], notes=[],
    )  # fmt: skip
    lab = LabInfo(name="[/]", kind="local", inventory="[/]", time_scale=1, timing_allowance_s=0)
    result = run_result(sc, run_id="r[/]1", lab=lab)
    run = tmp_path / "r[" / "]1"
    run.mkdir(parents=True)
    (run / "result.json").write_text(result.model_dump_json())
    proc = gameday("report", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "r[/]1" in proc.stdout and "s[/]1" in proc.stdout


def test_inventory_key_types(tmp_path: Path) -> None:
    inv = edited(tmp_path, INVENTORY, "ansible_connection: local", "1: x")
    assert_input_error(gameday("validate", str(inv)), f"{inv}:29", "serving.1")
    inv = edited(
        tmp_path, INVENTORY, "    serving:\n      hosts:", "    1:\n      - a\n    s:\n      hosts:"
    )
    assert_input_error(gameday("validate", str(inv)), f"{inv}:26", "all.children.1")
    inv = edited(
        tmp_path, INVENTORY, "    serving:\n      hosts:", "    serving: [a]\n    s:\n      hosts:"
    )
    assert_input_error(gameday("validate", str(inv)), f"{inv}:27", "all.children.serving")


def test_zone_directory(tmp_path: Path) -> None:
    log = tmp_path / "h.log"
    log.write_text("Apr 19 10:59:50 host x\n")
    assert_input_error(gameday("timeline", f"{log}@America"), str(log), "'America'")


@pytest.mark.parametrize(
    "line",
    [
        "2026-13-45 10:00:00 x",
        "Feb 31 10:00:00 host x",
        "2026-01-01T25:00:00Z x",
        "(APIServer pid=1) INFO 13-45 10:59:54 x",
        "[rank1]:[W0231 10:59:54.97 x",
    ],
)
def test_impossible_stamps(tmp_path: Path, line: str) -> None:
    log = tmp_path / "h.log"
    log.write_text(f"first, unstamped\n{line}\n")
    assert_input_error(gameday("timeline", str(log)), f"{log}:2")


def test_year_out_of_range(tmp_path: Path) -> None:
    log = tmp_path / "h.log"
    log.write_text("Jan 01 10:00:00 host x\nDec 31 23:00:00 host x\n")
    assert_input_error(gameday("timeline", str(log), "--year", "0"), "--year")
    assert_input_error(gameday("timeline", str(log), "--year", "10000"), "--year")
    # the last stamp of year 9999 in New York is past the end of UTC's year 9999
    assert_input_error(gameday("timeline", f"{log}@America/New_York", "--year", "9999"), f"{log}:2")


def test_deeply_nested_result(tmp_path: Path) -> None:
    for i, text in enumerate(
        ['{"a":' * 100_000 + "1" + "}" * 100_000, "[" * 100_000 + "]" * 100_000]
    ):
        run = tmp_path / f"run{i}"
        run.mkdir()
        (run / "result.json").write_text(text)
        assert_input_error(gameday("report", str(run)), str(run / "result.json"))
    (run / "result.json").write_text('{"run_id": ' + "9" * 5000 + "}")
    assert_input_error(gameday("report", str(run)), str(run / "result.json"))
    (run / "result.json").write_text('{"run_id": 1}')
    assert_input_error(gameday("report", str(run)), str(run / "result.json"), "run_id")


@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_devices_and_fifos(tmp_path: Path, kind: str) -> None:
    if kind == "zero":
        path = "/dev/zero"
    else:
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    for argv in (
        ["validate", path],
        ["list", path],
        ["run", path],
        ["validate", str(CWO), "--lab", path],
        ["triage", path],
        ["timeline", path],
        ["report", path],
    ):
        assert_input_error(gameday(*argv), path, "not a regular file")


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


def test_nodes_not_in_the_inventory(tmp_path: Path) -> None:
    group = edited(tmp_path, HEAD, "target: node1", "target: tp_group", "g.yaml")
    typo = edited(tmp_path, HEAD, "node: node2", "node: nod2", "t.yaml")
    for sc, where, field in (
        (group, f"{group}:25", "[target]: 'tp_group' is a group, not a host,"),
        (
            typo,
            f"{typo}:{_line_of(typo, 'node: nod2')}",
            "[expect.probes.0.node]: 'nod2' is not a host",
        ),
    ):
        assert_input_error(gameday("validate", str(sc), "--lab", str(INVENTORY)), where, field)
        proc = gameday("run", str(sc), "--lab", str(INVENTORY), "--reports", str(tmp_path))
        assert_input_error(proc, where, field, str(INVENTORY))
    assert gameday("validate", str(HEAD), "--lab", str(INVENTORY)).returncode == 0


SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


FAST = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=30,
)


def load(path: Path, inventory: bool) -> Any:
    return (load_inventory if inventory else load_scenario)(path)


def names_file(err: InputError, path: Path) -> InputError:
    assert err.file == str(path)
    assert str(err).startswith(f"{path}:")
    return err


def refused(path: Path, inventory: bool) -> InputError:
    """The loader refuses the file with an InputError that names it."""
    with pytest.raises(InputError) as err:
        load(path, inventory)
    return names_file(err.value, path)


@FAST
@given(text=st.text(max_size=2000))
def test_random_text(tmp_path_factory: Any, text: str) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    p.write_text(text)
    refused(p, inventory=False)
    refused(p, inventory=True)


@FAST
@given(data=json_like)
def test_random_structures(tmp_path_factory: Any, data: Any) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    err = refused(p, inventory=False)
    # a mapping is first asked for its apiVersion, anything else for being a mapping at all
    assert (err.field, err.line) == (("apiVersion", 1) if isinstance(data, dict) else (None, 1))
    refused(p, inventory=True)


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [q for k, v in obj.items() for q in _leaves(v, (*path, k))] + [path]
    if isinstance(obj, list):
        return [q for i, v in enumerate(obj) for q in _leaves(v, (*path, i))] + [path]
    return [path]


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _field_on_path(field: str, path: tuple[Any, ...], inventory: bool) -> bool:
    """Whether an error's field names the replaced part: in a scenario the path itself, a part
    above it or below its parent (a sibling the new value makes required or forbidden); in an
    inventory, where fields are <host>.<variable>, the host or variable the path goes through."""
    parts = [str(k) for k in path]
    if inventory:
        return bool(set(field.split(".")) & set(parts)) or field == "all.vars"
    dotted, parent = ".".join(parts), ".".join(parts[:-1])
    return dotted.startswith(field) or field.startswith(parent)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), value=json_like)
def test_type_confused_real_files(tmp_path_factory: Any, seed: int, value: Any) -> None:
    """A part of a real file replaced by anything: accepted with exactly that value in its place,
    or refused naming the file and the replaced field (or, when the structure itself broke, a
    line)."""
    rnd = random.Random(seed)
    for src, inventory in [*((s, False) for s in SCENARIOS), (INVENTORY, True)]:
        data = yaml.safe_load(src.read_text())
        path = rnd.choice(_leaves(data))
        p = tmp_path_factory.mktemp("fuzz") / src.name
        p.write_text(yaml.safe_dump(_set(data, path, copy.deepcopy(value))))
        try:
            got = load(p, inventory)
        except InputError as exc:
            err = names_file(exc, p)
            assert err.field is None or _field_on_path(err.field, path, inventory), (path, err)
            continue
        if inventory:
            # Ansible's own variables and empty parts are ignored; any other value is kept
            dumped = got.model_dump(mode="json")
            kept = value in [_at(dumped, q) for q in _leaves(dumped)]  # == : False is 0 here
            # YAML 1.1 reads an unquoted `no` as false: a restart policy of false is "no"
            restart_no = path[-1] == "gameday_restart" and value is False
            assert (
                kept
                or restart_no
                or str(path[-1]).startswith("ansible_")
                or value in (None, {}, [], "")
            )
        elif value == {} and path == ("detect",):
            assert got.scenario.model_dump()["detect"] == {"alerts": []}  # every default
        else:
            assert _at(got.scenario.model_dump(by_alias=True, mode="json"), path) == value


def test_every_truncation(tmp_path: Path) -> None:
    """A file cut anywhere is refused naming it, or, where YAML still reads the cut text as a
    document, accepted as that smaller file: a scenario only when no more than a comment was
    cut, an inventory with a subset of its hosts."""
    full_hosts = {n.name for n in load_inventory(INVENTORY).nodes}
    outcomes = set()
    for src, inventory in [*((s, False) for s in SCENARIOS[:3]), (INVENTORY, True)]:
        text = src.read_text()
        for cut in range(0, len(text), max(1, len(text) // 120)):
            p = tmp_path / src.name
            p.write_text(text[:cut])
            try:
                got = load(p, inventory)
            except InputError as exc:
                names_file(exc, p)
                outcomes.add("refused")
                continue
            outcomes.add("accepted")
            if inventory:
                assert {n.name for n in got.nodes} <= full_hosts
            else:
                assert yaml.safe_load(text[:cut]) == yaml.safe_load(text), cut
    assert outcomes == {"refused", "accepted"}


def test_deep_and_huge(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000)
    huge = tmp_path / "huge.yaml"
    huge.write_text("x: " + "y" * 2_000_000)
    bomb = tmp_path / "bomb.yaml"  # a billion laughs: aliases that expand exponentially
    bomb.write_text(
        "a: &a ['x','x','x','x','x','x','x','x','x']\n"
        + "".join(
            f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
    )
    for f in (deep, huge, bomb):
        for inventory in (False, True):
            refused(f, inventory)
