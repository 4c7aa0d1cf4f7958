"""The scenario's `load` section: its rules, and that it targets the lab's own nodes only."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import ScenarioError
from runner.spec.inventory_load import check_scenario, load_inventory
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
HEAD = (ROOT / "scenarios" / "head-only-restart.yaml").read_text()


def _with_load(tmp_path: Path, load: str) -> Path:
    # the file's own load section (before its verify) out, `load` in
    text = HEAD[: HEAD.index("\nload:")] + HEAD[HEAD.index("\nverify:") :] + load
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return f


def _line(f: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(f.read_text().splitlines(), 1) if needle in ln)


@pytest.mark.parametrize(
    "node", ["http://10.0.0.1:8000", "10.0.0.1", "example.com:443", "::1", "127.0.0.1"]
)
def test_a_load_aimed_at_an_address_is_refused_with_file_line_and_field(
    tmp_path: Path, node: str
) -> None:
    f = _with_load(tmp_path, f"load:\n  rate: 5\n  node: '{node}'\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(f)
    assert e.value.exit_code == 2
    assert (e.value.line, e.value.field) == (_line(f, "node: '"), "load.node")
    assert "load goes to the lab's own nodes only" in str(e.value)


def test_a_load_aimed_at_a_name_the_inventory_lacks_is_refused(tmp_path: Path) -> None:
    f = _with_load(tmp_path, "load:\n  rate: 5\n  node: elsewhere\n")
    ls = load_scenario(f)  # a name: held to the inventory once the lab is known
    with pytest.raises(ScenarioError) as e:
        check_scenario(ls, load_inventory(ROOT / "inventories" / "local.yaml"))
    assert (e.value.line, e.value.field) == (_line(f, "node: elsewhere"), "load.node")
    assert "'elsewhere' is not a host" in str(e.value)


@pytest.mark.parametrize(
    ("load", "says"),
    [
        ("load:\n  seed: 1\n", "either rate (open loop) or concurrency"),
        ("load:\n  rate: 5\n  concurrency: 2\n", "either rate (open loop) or concurrency"),
        ("load:\n  rate: 5\n  impact:\n    fault: {min_requests: 3}\n", "at least one bound"),
        ("load:\n  rate: 5\n  prompt_tokens: {min: 9, max: 2}\n", "min (9) is larger"),
        ("load:\n  rate: 5\n  mix: [{api: embeddings}]\n", "'chat' or 'completions'"),
        ("load:\n  rate: 800\n", "less than or equal to 500"),
        ("load:\n  rate: 5\n  target: node1\n", "unknown key"),
    ],
)
def test_a_load_section_is_checked_like_the_rest(tmp_path: Path, load: str, says: str) -> None:
    f = _with_load(tmp_path, load)
    with pytest.raises(ScenarioError) as e:
        load_scenario(f)
    assert says in str(e.value)
    assert e.value.line is not None and e.value.line >= _line(f, "load:")


def test_the_shipped_head_only_restart_carries_a_load_with_impact_bounds() -> None:
    sc = load_scenario(ROOT / "scenarios" / "head-only-restart.yaml").scenario
    assert sc.load is not None and sc.load.rate
    assert sc.load.impact.fault and sc.load.impact.users_saw_first


def test_the_manuals_load_example_is_the_shipped_scenarios() -> None:
    doc = (ROOT / "docs" / "scenario-format.md").read_text()
    block = doc.split("## Load: what users felt", 1)[1].split("```yaml\n", 1)[1].split("```")[0]
    assert "\n" + block + "verify:" in HEAD


def test_a_request_timeout_longer_than_the_load_runs_on_the_lab_is_refused(
    tmp_path: Path,
) -> None:
    # timeout_s is wall seconds (not scaled), max_s real-world: 600 s at x100 are 6 wall s
    f = _with_load(tmp_path, "load:\n  rate: 5\n  max_s: 600\n  timeout_s: 9.5\n")
    local = load_inventory(ROOT / "inventories" / "local.yaml")
    with pytest.raises(ScenarioError) as e:
        check_scenario(load_scenario(f), local)
    assert e.value.exit_code == 2
    assert (e.value.line, e.value.field) == (_line(f, "timeout_s: 9.5"), "load.timeout_s")
    assert "9.5 wall seconds, not scaled" in str(e.value) and "x100: 6 wall seconds" in str(e.value)
    # the same timeout fits a load that may run 10 wall seconds there
    ok = _with_load(tmp_path, "load:\n  rate: 5\n  max_s: 1000\n  timeout_s: 9.5\n")
    check_scenario(load_scenario(ok), local)


def test_a_labs_share_scales_the_rate_or_the_users_and_nothing_else() -> None:
    from runner.spec.workload import Load

    load = Load.model_validate({"rate": 10, "timeout_s": 10, "baseline_requests": 20})
    assert load.scaled(1) is load
    part = load.scaled(0.3)
    assert (str(part.rate), part.timeout_s, part.baseline_requests) == ("3.0", 10, 20)
    assert part.impact == load.impact and part.loop_text() == "3 requests/s"
    slow = Load.model_validate({"rate": 0.001}).scaled(0.3)
    assert slow.rate is not None and 0 < slow.rate < 0.001  # never rounded to no load at all
    users = Load.model_validate({"concurrency": 8})
    assert users.scaled(0.3).concurrency == 2
    assert users.scaled(0.01).concurrency == 1  # at least one user
    assert [Load.model_validate({"concurrency": c}).scaled(0.5).concurrency for c in (3, 5, 7)] == [
        2,
        3,
        4,
    ]  # halves round up
