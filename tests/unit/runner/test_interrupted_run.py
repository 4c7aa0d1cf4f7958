"""A run stopped by SIGTERM (a CI job cancelled) or Ctrl-C: the scenario under way cleans up, and
the reports of what ran are written, marked interrupted. On the fake lab, with real scenario
runs; tests/e2e/test_local_lab.py sends the real signal to a `gameday run`."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from runner.labs.fake import FakeLab
from runner.results.schema import ScenarioResult
from runner.run import suite
from runner.run.interrupt import Terminated
from runner.spec.scenario import LoadedScenario, load_scenario
from tests.support.fakelab import inventory, scenario_doc, wrong_flag


def scenario(tmp_path: Path, sid: str) -> LoadedScenario:
    p = tmp_path / f"{sid}.yaml"
    p.write_text(yaml.safe_dump(scenario_doc(metadata={"id": sid, "title": sid}), sort_keys=False))
    return load_scenario(p)


@pytest.mark.parametrize(
    ("signal", "raised"), [("SIGTERM", Terminated), ("SIGINT", KeyboardInterrupt)]
)
def test_an_interrupted_run_reports_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signal: str, raised: type[BaseException]
) -> None:
    lab = FakeLab(inventory(tmp_path), wrong_flag(), state_dir=tmp_path / "state")
    lab.up()
    real = suite.run_scenario

    def on_fake(ls: LoadedScenario, lab: Any, journal: Any, progress: Any) -> ScenarioResult:
        return real(ls, lab, journal, progress, http=httpx.Client(transport=lab.transport))

    monkeypatch.setattr(suite, "run_scenario", on_fake)
    monkeypatch.setattr(suite, "_open_labs", lambda *_a: [lab])
    restarts = {"n": 0}

    def interrupt(name: str) -> None:
        if name == "restart":  # the second scenario's "restart and hope"
            restarts["n"] += 1
            if restarts["n"] == 2:
                lab.on_call = lambda _n: None  # cleanup's own calls go through
                raise raised

    lab.on_call = interrupt
    todo = [scenario(tmp_path, s) for s in ("first", "second", "third")]
    reports = tmp_path / "reports"
    with pytest.raises(suite.RunInterrupted) as stopped:
        suite.run_suite(todo, lab.inventory, reports, lambda _m: None)
    run_dir = stopped.value.outcome.report_dir
    assert stopped.value.how.value == signal
    data = json.loads((run_dir / "result.json").read_text())
    assert (data["interrupted"], data["verdict"]) == (signal, "error")
    assert [(s["id"], s["verdict"]) for s in data["scenarios"]] == [
        ("first", "passed"),
        ("second", "error"),
        ("third", "skipped"),
    ]
    second = data["scenarios"][1]
    assert [
        (a["name"], a["observed"]) for a in second["assertions"] if a["verdict"] == "error"
    ] == [("interrupted", f"interrupted by {signal} during recover; cleanup ran")]
    assert data["scenarios"][2]["notes"] == [f"not run: interrupted by {signal}"]
    cases = ET.parse(run_dir / "junit.xml").getroot().findall("testsuite/testcase")
    assert [c[0].tag for c in cases] == ["system-out", "error", "skipped"]
    assert (
        (run_dir / "report.md")
        .read_text()
        .startswith(f"# gameday run {data['run_id']}: ERROR (interrupted by {signal})\n")
    )
    assert (reports / "latest").exists()
    assert lab.leftovers() == []  # the interrupted scenario cleaned up


def test_a_finished_run_has_no_interrupted_key(tmp_path: Path) -> None:
    from runner.report import write_reports
    from tests.support.results import run_result, scenario_result

    write_reports(run_result(scenario_result()), tmp_path)
    assert "interrupted" not in json.loads((tmp_path / "result.json").read_text())
