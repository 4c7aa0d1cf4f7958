"""Hostile input to the loaders: malformed, truncated, deeply nested, huge and type-confused
scenario and inventory files. Never a traceback: each case states whether the file must be
refused (an InputError naming the file, and the field or line where there is one) or accepted
(with the value it holds)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


# ---- input the CLI must answer without a traceback ----------------------------------------------

CWO = ROOT / "scenarios" / "context-window-overflow.yaml"


class _IdleLab:
    """Just enough of a lab for run_suite around a patched run_scenario."""

    def __init__(self, inventory: Any, state_dir: Path) -> None:
        self.inventory = inventory
        self.kind = inventory.lab.kind
        self.state_dir = state_dir
        self.artifacts_dir: Path | None = None

    def is_up(self) -> bool:
        return True


def test_an_error_in_one_scenario_is_its_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    import runner.run.suite
    from runner.cli.main import main
    from runner.results.schema import Verdict

    def run_scenario(ls: Any, lab: Any, journal: Any, progress: Any) -> Any:
        if ls.scenario.metadata.id == "context-window-overflow":
            raise KeyError("tp_group")
        return runner.run.suite.skipped(ls, lab).model_copy(update={"verdict": Verdict.PASSED})

    monkeypatch.setattr(runner.run.suite, "run_scenario", run_scenario)
    monkeypatch.setattr(runner.run.suite, "open_lab", lambda inv: _IdleLab(inv, tmp_path / "state"))
    scenarios = [str(CWO), str(ROOT / "scenarios" / "kv-cache-shortage.yaml")]
    reports = tmp_path / "reports"
    got = CliRunner().invoke(main, ["run", *scenarios, "--reports", str(reports), "--json"])
    assert got.exit_code == 3, got.output
    result = json.loads(got.stdout)
    assert [s["verdict"] for s in result["scenarios"]] == ["error", "passed"]
    assert result["verdict"] == "error"
    assert "KeyError: 'tp_group'" in result["scenarios"][0]["assertions"][0]["observed"]
    run = reports / result["run_id"]
    assert sorted(p.name for p in run.iterdir()) == sorted(runner.report.FILES)
    error = ET.parse(run / "junit.xml").find(".//testcase[@name='context-window-overflow']/error")
    assert error is not None and "KeyError: 'tp_group'" in error.get("message", "")
