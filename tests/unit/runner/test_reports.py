from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runner.report import write_reports
from runner.results.schema import RunResult
from tests.support.results import run_result, scenario_result

EVIL = "<script>alert('x')</script> & <b>bold</b>"


def result() -> RunResult:
    return run_result(scenario_result(EVIL, file="scenarios/s1.yaml"))


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


def test_runbooks_in_every_report(tmp_path: Path) -> None:
    runbooks = {
        "recover 2: Raise the KV cache": "runbooks/kv-cache.md#raise",
        "recover 3: Page the owner": "https://wiki.example/oncall?token=abc",
    }
    s = scenario_result("kv", file="scenarios/kv.yaml").model_copy(update={"runbooks": runbooks})
    write_reports(run_result(s), tmp_path)
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["scenarios"][0]["runbooks"] == {
        "recover 2: Raise the KV cache": "runbooks/kv-cache.md#raise",
        "recover 3: Page the owner": "https://wiki.example/oncall?token=<redacted>",
    }
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    case = suite.find("testcase")
    assert case is not None
    props = [(p.get("name"), p.get("value")) for p in suite.iterfind("properties/property")]
    assert [p for p in props if p[0] and p[0].startswith("runbook")] == [
        ("runbook recover 2: Raise the KV cache", "runbooks/kv-cache.md#raise"),
        ("runbook recover 3: Page the owner", "https://wiki.example/oncall?token=<redacted>"),
    ]
    assert (case.find("system-out").text or "").endswith(  # type: ignore[union-attr]
        "runbook of recover 2: Raise the KV cache: runbooks/kv-cache.md#raise\n"
        "runbook of recover 3: Page the owner: https://wiki.example/oncall?token=<redacted>"
    )
    md = (tmp_path / "report.md").read_text()
    assert "- runbook of recover 2: Raise the KV cache: runbooks/kv-cache.md#raise\n" in md
    html = (tmp_path / "report.html").read_text()
    assert "<li>recover 2: Raise the KV cache: <code>runbooks/kv-cache.md#raise</code></li>" in html
    assert '<a href="https://wiki.example/oncall?token=&lt;redacted&gt;">' in html


def not_restored() -> RunResult:
    from runner.results.schema import Assertion, Phase, Verdict

    why = Assertion(
        name="recover 1: Runbook: restores service",
        phase=Phase.RECOVER,
        verdict=Verdict.FAILED,
        expected="ready, then every verification probe passes",
        observed="not restored: node crash_looping, ready=False; its last error line: "
        "ValueError: max_model_len (99999) is too large",
        detail="the step's output (its last lines):\nrestarting serving\nfix.sh: no such flag",
    )
    return run_result(scenario_result("x", assertions=[why]))


def test_junit_failure_says_why_not_only_what(tmp_path: Path) -> None:
    """CI shows the <failure>'s message as the reason: it carries what was observed, and the
    failure's text the detail (the step's output)."""
    write_reports(not_restored(), tmp_path)
    failure = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite/testcase/failure")
    assert failure is not None
    assert failure.get("message") == (
        "1 assertion(s) failed: recover 1: Runbook: restores service: not restored: node "
        "crash_looping, ready=False; its last error line: ValueError: max_model_len (99999) is "
        "too large"
    )
    assert (failure.text or "").endswith(
        "\n  the step's output (its last lines):\n  restarting serving\n  fix.sh: no such flag"
    )


def test_the_terminal_shows_a_failure_s_detail(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from runner.cli import output

    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=120, soft_wrap=True))
    output.run_summary(not_restored(), "reports/r1")
    text = buf.getvalue()
    assert "observed: not restored: node crash_looping, ready=False; its last error line" in text
    assert "    the step's output (its last lines):\n    restarting serving\n" in text


def test_time_to_detect_is_absent_when_not_measured(tmp_path: Path) -> None:
    from runner.results.schema import load_result

    measured = scenario_result("a", id="a", time_to_detect_s=12.5)
    write_reports(run_result(scenario_result("n", id="n"), measured), tmp_path)
    data = json.loads((tmp_path / "result.json").read_text())
    assert "time_to_detect_s" not in data["scenarios"][0]  # not null
    assert data["scenarios"][1]["time_to_detect_s"] == 12.5
    loaded = load_result(tmp_path / "result.json")
    assert [s.time_to_detect_s for s in loaded.scenarios] == [None, 12.5]
    # a result written with null (older gameday) reads the same
    data["scenarios"][0]["time_to_detect_s"] = None
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert load_result(tmp_path / "old.json").scenarios[0].time_to_detect_s is None
