from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from runner.report import write_reports
from runner.results import (
    Assertion,
    Evidence,
    EvidenceLine,
    LabInfo,
    RunResult,
    ScenarioResult,
    TimelineEvent,
    Verdict,
)

NOW = datetime.now(UTC)
EVIL = "<script>alert('x')</script> & <b>bold</b>"


def result() -> RunResult:
    sc = ScenarioResult(
        id="s1",
        title=EVIL,
        file="scenarios/s1.yaml",
        lab="local",
        verdict=Verdict.FAILED,
        time_to_fail_s=9.0,
        time_to_recover_s=None,
        started_at=NOW,
        finished_at=NOW,
        assertions=[
            Assertion(
                name="expect: exit code",
                phase="expect",
                verdict=Verdict.FAILED,
                expected="exit code 0",
                observed=EVIL,
            )
        ],
        timeline=[TimelineEvent(ts=NOW, source="log:serving", clock="runtime", event=EVIL)],
        evidence=[Evidence(title="logs", lines=[EvidenceLine(ts=NOW, text=EVIL, highlight=True)])],
        notes=[EVIL],
    )
    return RunResult(
        run_id="r1",
        gameday_version="0",
        started_at=NOW,
        finished_at=NOW,
        lab=LabInfo(
            name="local", kind="local", inventory="i", time_scale=100, timing_allowance_s=0.1
        ),
        verdict=Verdict.FAILED,
        scenarios=[sc],
    )


def test_all_four_files(tmp_path: Path) -> None:
    write_reports(result(), tmp_path)
    data = json.loads((tmp_path / "result.json").read_text())
    s = data["scenarios"][0]
    for key in ("id", "verdict", "time_to_fail_s", "time_to_recover_s", "assertions"):
        assert key in s
    assert set(s["assertions"][0]) >= {"name", "verdict", "expected", "observed"}
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    case = suite.find("testcase")
    assert case is not None and case.find("failure") is not None
    assert "expected: exit code 0" in (case.find("failure").text or "")  # type: ignore[union-attr]
    assert "| FAIL | expect: exit code |" in (tmp_path / "report.md").read_text()


def test_html_escapes_everything(tmp_path: Path) -> None:
    write_reports(result(), tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "<script>" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;" in html
    assert "<svg" in html  # the timeline picture
