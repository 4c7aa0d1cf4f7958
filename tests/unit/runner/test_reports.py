from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

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
    assert props[5:] == [
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
