"""A drill's after-action report: result.json's mode and drill record, report.md, report.html and
junit.xml (a shortcut tried is a finding, not a failure)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from runner.report import write_reports
from runner.results.drill_record import ActionKind, HintView, ObservedAction
from runner.results.schema import DrillOutcome, DrillRecord, RunMode, Verdict, load_result
from runner.spec.kinds import Outcome
from tests.support.results import NOW, run_result, scenario_result

SHORTCUT = ObservedAction(
    at_s=42.5,
    kind=ActionKind.RESTART,
    nodes=("node1",),
    detail="restarted",
    step="Restart the head alone",
    outcome=Outcome.DOES_NOT_RESTORE,
    shortcut=True,
    why="the workers never rejoin <a new head>",
)
FIX = ObservedAction(
    at_s=130.25,
    kind=ActionKind.GROUP_RESTART,
    nodes=("node1", "node2"),
    detail="2 nodes restarted together",
    step="Restart all four nodes together",
    outcome=Outcome.RESTORES,
)
RECORD = DrillRecord(
    handed_over_at=NOW,
    time_to_detect_s=3.0,  # wall: 300 s real-world at x100, within the 420 s window
    time_to_acknowledge_s=12.0,
    time_to_recover_s=150.0,
    hints=[HintView(index=1, text="look at node2", at_s=60.0, requested=True)],
    actions=[SHORTCUT, FIX],
    shortcuts=[SHORTCUT],
    outcome=DrillOutcome.RECOVERED,
    detect_within_s=420.0,
    recover_within_s=120.0,
    time_scale=100.0,  # run_result's lab
)


def written(tmp_path: Path) -> Path:
    s = scenario_result("drill", verdict=Verdict.PASSED, assertions=[], drill=RECORD)
    result = run_result(s).model_copy(update={"mode": RunMode.DRILL, "verdict": Verdict.PASSED})
    write_reports(result, tmp_path)
    return tmp_path


def test_result_json_has_the_mode_and_the_drill(tmp_path: Path) -> None:
    out = written(tmp_path)
    data = json.loads((out / "result.json").read_text())
    assert data["mode"] == "drill"
    d = data["scenarios"][0]["drill"]
    assert (d["outcome"], d["time_to_detect_s"], d["time_to_acknowledge_s"]) == (
        "recovered",
        3.0,
        12.0,
    )
    assert [(a["at_s"], a["kind"], a["shortcut"]) for a in d["actions"]] == [
        (42.5, "restart", True),
        (130.25, "group_restart", False),
    ]
    assert [a["why"] for a in d["shortcuts"]] == ["the workers never rejoin <a new head>"]
    assert load_result(out / "result.json").scenarios[0].drill == RECORD


def test_a_run_s_result_says_mode_run() -> None:
    assert run_result(scenario_result()).mode is RunMode.RUN


def test_report_md_shows_times_against_windows_actions_and_hints(tmp_path: Path) -> None:
    md = (written(tmp_path) / "report.md").read_text()
    assert md.startswith("# gameday drill ")
    for line in (
        "| outcome | recovered |",
        # the first alert fires on the lab's clock: 3.0 wall s at x100 are 300 real-world s
        "| time to detect (first alert) | 300.0 s [3.000 s lab] (within the 420 s window) |",
        "| time to acknowledge | 12.0 s wall |",
        "| time to recover | 150.0 s wall (OVER the 120 s window) |",
        "| hints used | 1 |",
        "| shortcuts tried | 1 |",
        "| 42.5 s | restart: restarted | node1 | SHORTCUT Restart the head alone: the workers "
        "never rejoin &lt;a new head&gt; |",
        "| 130.2 s | group_restart: 2 nodes restarted together | node1, node2 | Restart all four "
        "nodes together |",
        "- hint 1 asked for at 60.0 s: look at node2",
    ):
        assert line in md.splitlines(), line


def test_junit_has_the_times_as_properties_and_a_shortcut_is_no_failure(tmp_path: Path) -> None:
    root = ET.parse(written(tmp_path) / "junit.xml").getroot()
    case = root.find("testsuite/testcase")
    assert case is not None
    assert case.find("failure") is None and case.find("error") is None
    suite = root.find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iterfind("properties/property")}
    assert {k: v for k, v in props.items() if not k.startswith("gameday.")} == {
        "mode": "drill",
        "outcome": "recovered",
        "time_to_detect_s": "3.000",
        "time_to_acknowledge_s": "12.000",
        "time_to_recover_s": "150.000",
        "hints_used": "1",
        "shortcuts_tried": "1",
        "shortcut 1": "Restart the head alone at 42.5 s: the workers never rejoin <a new head>",
        "hint 1": "at 60.0 s (asked)",
    }


def test_report_html_shows_the_drill_escaped(tmp_path: Path) -> None:
    html = (written(tmp_path) / "report.html").read_text()
    assert "<th>time to recover</th><td>150.0 s wall (OVER the 120 s window)</td>" in html
    assert "SHORTCUT Restart the head alone: the workers never rejoin &lt;a new head&gt;" in html
    assert "<a new head>" not in html


def test_junit_leaves_out_a_time_not_measured_and_names_a_seat_s_mode(tmp_path: Path) -> None:
    """A drill with no alert and no acknowledgement has no such properties (absent, not empty);
    a workshop seat's drill says `seat`."""
    record = RECORD.model_copy(update={"time_to_detect_s": None, "time_to_acknowledge_s": None})
    s = scenario_result("drill", verdict=Verdict.PASSED, assertions=[], drill=record)
    result = run_result(s).model_copy(update={"mode": RunMode.SEAT, "verdict": Verdict.PASSED})
    write_reports(result, tmp_path)
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iterfind("properties/property")}
    assert props["mode"] == "seat"
    assert "time_to_detect_s" not in props and "time_to_acknowledge_s" not in props
    assert props["time_to_recover_s"] == "150.000"
    assert "" not in props.values()


def test_the_after_action_report_says_how_many_requests_failed_while_people_worked(
    tmp_path: Path,
) -> None:
    from runner.results.schema import ImpactFigures, PhaseFigures

    def phase(name: str, sent: int, failed: int) -> PhaseFigures:
        rate = failed / sent if sent else None
        return PhaseFigures(phase=name, sent=sent, failed=failed, error_rate=rate)

    imp = ImpactFigures(
        mode="open",
        rate=20,
        node="node1",
        phases=[
            phase("baseline", 40, 0),
            phase("inject", 0, 0),
            phase("fault", 2400, 2380),
            phase("recover", 0, 0),
            phase("verify", 40, 0),
        ],
    )
    s = scenario_result("drill", verdict=Verdict.PASSED, assertions=[], drill=RECORD, impact=imp)
    result = run_result(s).model_copy(update={"mode": RunMode.DRILL, "verdict": Verdict.PASSED})
    write_reports(result, tmp_path)
    md = (tmp_path / "report.md").read_text().splitlines()
    assert "| requests while people worked | 2400 sent, 2380 failed (99.2%) |" in md
    assert "| requests after service was back | 40 sent, 0 failed (0.0%) |" in md
    html = (tmp_path / "report.html").read_text()
    assert "<th>requests while people worked</th><td>2400 sent, 2380 failed (99.2%)</td>" in html
