"""`run --parallel N` on a machine that holds fewer instances: said before the run, in the
terminal and in each scenario's notes, not met as a probe timeout in the baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from runner.cli.main import main
from runner.results.rundirs import LATEST
from runner.run import capacity
from runner.run.capacity import overload
from runner.spec.inventory_load import load_inventory
from tests.unit.runner.test_hostile_input import ROOT, _IdleLab

LOCAL = ROOT / "inventories" / "local.yaml"
THREE = ["tp-mismatch", "context-window-overflow", "kv-cache-shortage"]


def test_one_instance_per_core_is_what_the_machine_holds() -> None:
    inv = load_inventory(LOCAL)
    assert overload(inv, 1, cores=1) is None
    assert overload(inv, 2, cores=2) is None
    over = overload(inv, 3, cores=2)
    assert over is not None and (over.asked, over.holds, over.cores) == (3, 2, 2)
    assert "--parallel 3 on 2 usable core(s)" in over.sentence()
    assert "this machine holds 2" in over.sentence()
    assert over.hint().startswith("--parallel 2")


def test_compose_instances_share_the_machine_too() -> None:
    assert overload(load_inventory(ROOT / "inventories" / "compose.yaml"), 4, cores=2) is not None


def test_kubernetes_instances_run_on_the_cluster_not_here() -> None:
    inv = load_inventory(ROOT / "inventories" / "eks.yaml")
    assert overload(inv, 8, cores=2) is None


def _idle_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> Any:
    import runner.run.suite

    def run_scenario(ls: Any, lab: Any, journal: Any, progress: Any) -> Any:
        return runner.run.suite.skipped(ls, lab)

    monkeypatch.setattr(runner.run.suite, "run_scenario", run_scenario)
    monkeypatch.setattr(runner.run.suite, "open_lab", lambda inv: _IdleLab(inv, tmp_path / "state"))
    monkeypatch.setattr(capacity, "usable_cores", lambda: 2)
    scenarios = [str(ROOT / "scenarios" / f"{s}.yaml") for s in THREE]
    return CliRunner().invoke(
        main,
        ["run", *scenarios, "--lab", str(LOCAL), "--reports", str(tmp_path / "reports"), *args],
    )


def test_run_says_before_it_starts_that_the_machine_holds_fewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _idle_run(monkeypatch, tmp_path, "--parallel", "3")
    assert got.exit_code == 0, got.output
    err = " ".join(got.stderr.split())
    assert err.startswith("warning: --parallel 3 on 2 usable core(s)"), err
    assert "hint: --parallel 2" in err
    result = json.loads((tmp_path / "reports" / LATEST / "result.json").read_text())
    for s in result["scenarios"]:
        assert any("this machine holds 2" in n for n in s["notes"]), s["notes"]


def test_no_warning_within_what_the_machine_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _idle_run(monkeypatch, tmp_path, "--parallel", "2")
    assert got.exit_code == 0, got.output
    assert "warning" not in got.stderr
    result = json.loads((tmp_path / "reports" / LATEST / "result.json").read_text())
    assert not any("holds" in n for s in result["scenarios"] for n in s["notes"])


def test_a_dry_run_says_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = _idle_run(monkeypatch, tmp_path, "--parallel", "3", "--dry-run")
    assert got.exit_code == 0, got.output
    assert "warning: --parallel 3 on 2 usable core(s)" in " ".join(got.stderr.split())
