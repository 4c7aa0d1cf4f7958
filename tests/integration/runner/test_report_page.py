"""report.html in headless Debian Chromium: the failure at the top, a Gantt lane per node with
its brackets, and no text outside its box, measured in the page. Built from a real recorded run
(tests/data/report/seven-passed.json) with one scenario turned into a failure, and from a real
failed drill (drill-failed.json). The screenshots are kept in the test's output directory and
in reports/test-artefacts/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.report import write_reports
from runner.results.schema import Assertion, Phase, RunResult, TimelineEvent, Verdict, load_result
from tests.support import browser

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "report"
ARTEFACTS = ROOT / "reports" / "test-artefacts"

LONG_OBSERVED = (
    "ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len "
    "(max_position_embeddings=32768 or model_max_length=None in model's config.json). To allow "
    "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_"
    "MAX_MODEL_LEN_IS_A_DELIBERATELY_LONG_TOKEN_THAT_HAS_NO_SPACE_TO_BREAK_AT_ANYWHERE_AT_ALL and "
    "then dial tcp 127.0.80.13:8000: connect: connection refused"
)
FAILED_NAME = "verify: time to recover"


def with_a_failure(run: RunResult) -> RunResult:
    """The real run, its head-only-restart failed on its time to recover (and a long value)."""
    scenarios = []
    for s in run.scenarios:
        if s.id == "head-only-restart":
            failed = Assertion(
                name=FAILED_NAME,
                phase=Phase.VERIFY,
                verdict=Verdict.FAILED,
                expected="within 60 s real",
                observed=LONG_OBSERVED,
            )
            inject = TimelineEvent(
                ts=s.timeline[2].ts,
                source="runner",
                clock="runner (UTC)",
                event="inject: node1: args --max-model-len 4096 -> --max-model-len 65536",
            )
            s = s.model_copy(
                update={
                    "verdict": Verdict.FAILED,
                    "assertions": [*s.assertions, failed],
                    "timeline": [*s.timeline, inject],
                }
            )
        scenarios.append(s)
    return run.model_copy(update={"scenarios": scenarios, "verdict": Verdict.FAILED})


OVERFLOW_JS = """
document.querySelectorAll('details').forEach(d => d.open = true);
const out = [];
const html = document.documentElement;
if (html.scrollWidth > html.clientWidth) out.push('page ' + html.scrollWidth);
for (const el of document.querySelectorAll(
    'td, th, dd, dt, p, li, h1, h2, h3, summary, .log, .log div, .note, .full')) {
  if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
    out.push(el.tagName + ' ' + el.scrollWidth + '>' + el.clientWidth + ': '
             + el.textContent.slice(0, 60));
}
for (const svg of document.querySelectorAll('svg.gantt')) {
  const vb = svg.viewBox.baseVal;
  for (const t of svg.querySelectorAll('text')) {
    const b = t.getBBox();
    if (b.x < 0 || b.y < 0 || b.x + b.width > vb.width + 0.5 || b.y + b.height > vb.height + 0.5)
      out.push('svg text ' + t.textContent + ' ' + JSON.stringify([b.x, b.y, b.width, b.height]));
  }
}
return out;
"""


def need_browser() -> None:
    reason = browser.missing()
    if reason is not None:
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the browser test is required here (GAMEDAY_REQUIRE_DOCKER=1): {reason}")
        pytest.skip(reason)


def keep(shot: Path) -> None:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, ARTEFACTS / shot.name)
    print(f"screenshot: {shot} (and {ARTEFACTS / shot.name})")


def texts(driver: Any, css: str) -> list[str]:
    got: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent);", css
    )
    return got


def test_a_failed_run_reads_at_a_glance(tmp_path: Path) -> None:
    need_browser()
    write_reports(with_a_failure(load_result(DATA / "seven-passed.json")), tmp_path)
    with browser.chromium() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        # the failure first, above the summary, on the first screen
        first = driver.execute_script(
            "const f = document.querySelector('.failures .failed-assertion');"
            "const t = document.querySelector('table.summary');"
            "return [f.textContent, f.getBoundingClientRect().top,"
            " t.getBoundingClientRect().top, t.getBoundingClientRect().bottom, innerHeight];"
        )
        assert first[0] == f"{FAILED_NAME} (failed)"
        assert first[1] < first[2] < first[3] <= first[4]
        assert texts(driver, "table.summary td:nth-child(3)")[2] == FAILED_NAME
        # the whole value is there, folded, and the change shows before and after
        assert LONG_OBSERVED in texts(driver, ".failures .full")
        assert texts(driver, "#head-only-restart .injected .after") == ["--max-model-len 65536"]
        shot = tmp_path / "report-page-top.png"
        assert driver.save_screenshot(str(shot))
        keep(shot)

        svg = "#head-only-restart svg.gantt"
        lanes = driver.execute_script(  # a label's own text, without its <title>
            "return Array.from(document.querySelectorAll(arguments[0]),"
            " e => e.firstChild.nodeValue);",
            f"{svg} text.lane",
        )
        assert lanes == [
            "runner",
            "recover 1",
            "recover 2",
            "node1",
            "node2",
            "node3",
            "node4",
            "prometheus",
        ]
        assert texts(driver, f"{svg} .bracket > title") == [
            "time to fail 15.4 s [0.154 s lab]: +4.0 s [0.040 s lab] to +19.4 s [0.194 s lab]",
            "time to detect 313.0 s [3.130 s lab]: +4.0 s [0.040 s lab] to +317.0 s [3.170 s lab]",
            "time to recover 124.1 s [1.241 s lab]: +972.7 s [9.727 s lab] to +1096.8 s "
            "[10.968 s lab]",
        ]
        assert driver.execute_script(OVERFLOW_JS) == []
        driver.execute_script(
            "document.querySelector(arguments[0]).scrollIntoView()", "#head-only-restart"
        )
        shot = tmp_path / "report-page-gantt.png"
        assert driver.save_screenshot(str(shot))
        keep(shot)


def test_a_real_failed_drill_shows_its_failed_assertion_first(tmp_path: Path) -> None:
    need_browser()
    write_reports(load_result(DATA / "drill-failed.json"), tmp_path)
    with browser.chromium() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        assert texts(driver, ".failures .failed-assertion") == ["drill: time to recover (failed)"]
        assert texts(driver, ".failures dd") == [
            "expected: recovered within 1800 s of the fault (wall clock)",
            "observed: not recovered: gave up",
        ]
        assert driver.execute_script(OVERFLOW_JS) == []
        shot = tmp_path / "report-page-drill.png"
        assert driver.save_screenshot(str(shot))
        keep(shot)


def test_a_real_failed_run_shows_its_failure_first_and_a_lane_per_node(tmp_path: Path) -> None:
    """head-only-restart run on the local lab with its exit code expected wrong (3, not 0):
    its events carry the kinds the runner records."""
    need_browser()
    write_reports(load_result(DATA / "head-only-restart-failed.json"), tmp_path)
    with browser.chromium() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        assert texts(driver, ".failures .failed-assertion") == ["expect: exit code (failed)"]
        assert texts(driver, ".failures dd") == ["expected: exit code 3", "observed: exit code 0"]
        svg = "#head-only-restart-wrong svg.gantt"
        lanes = driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]),"
            " e => e.firstChild.nodeValue);",
            f"{svg} text.lane",
        )
        assert lanes == [
            "runner",
            "recover 1",
            "recover 2",
            "node1",
            "node2",
            "node3",
            "node4",
            "prometheus",
        ]
        brackets = driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]),"
            " e => e.firstChild.nodeValue);",
            f"{svg} .bracket-label",
        )
        assert brackets == [
            "time to fail 26.5 s [0.265 s lab]",
            "time to detect 333.8 s [3.338 s lab]",
            "time to recover 145.5 s [1.455 s lab]",
        ]
        assert driver.execute_script(OVERFLOW_JS) == []
        driver.execute_script("document.querySelector(arguments[0]).scrollIntoView()", svg)
        shot = tmp_path / "report-page-failed-run.png"
        assert driver.save_screenshot(str(shot))
        keep(shot)
