"""Durations a person reads are real-world seconds, with lab seconds in brackets on a scaled lab;
the terminal table never cuts a verdict, even at 60 columns."""

from __future__ import annotations

import io

import pytest

from runner.cli import output
from runner.report import html, markdown
from runner.results.durations import real_s
from runner.results.schema import Verdict
from tests.support.results import run_result, scenario_result


def test_real_seconds_with_lab_seconds_in_brackets() -> None:
    assert real_s(120.0, 100) == "120.0 s [1.200 s lab]"
    assert real_s(120.0, 1) == "120.0 s"
    assert real_s(None, 100) == "-"


def test_markdown_has_every_time_on_one_clock() -> None:
    s = scenario_result(
        "x", id="kv", time_to_fail_s=150.0, time_to_detect_s=160.0, time_to_recover_s=300.0
    )
    md = markdown(run_result(s))
    assert (
        "| kv | failed | 150.0 s [1.500 s lab] | 160.0 s [1.600 s lab] | 300.0 s [3.000 s lab] |"
        in md
    )
    assert "Times are real-world seconds; the lab's own seconds, in brackets," in md


def table_at(width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=width, soft_wrap=True))
    scenarios = [
        scenario_result("x", id="context-window-overflow", verdict=Verdict.PASSED),
        scenario_result("x", id="head-only-restart-with-workers", time_to_recover_s=512.25),
        scenario_result("x", id="kv", verdict=Verdict.SKIPPED, time_to_fail_s=None),
    ]
    output.run_summary(run_result(*scenarios), "reports/r1")
    return buf.getvalue()


def test_a_narrow_terminal_gets_a_block_per_scenario_nothing_folded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = table_at(60, monkeypatch)
    assert "┃" not in text and "…" not in text
    lines = text.splitlines()
    summary = lines[: next(i for i, ln in enumerate(lines) if ln.startswith("FAILED"))]
    assert max(len(line) for line in summary) <= 60
    heads = [ln for ln in lines if ln.endswith(("  passed", "  failed", "  skipped"))]
    assert heads == [
        "context-window-overflow  passed",
        "head-only-restart-with-workers  failed",
        "kv  skipped",
    ]
    block = lines[lines.index("head-only-restart-with-workers  failed") + 1 :]
    assert block[:2] == [
        "  time to fail    9.0 s [0.090 s lab]",
        "  time to recover 512.2 s [5.122 s lab]",
    ]


def test_a_wide_terminal_gets_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    text = table_at(140, monkeypatch)
    rows = [line for line in text.splitlines() if line.startswith("│")]
    cells = [[c.strip() for c in row.split("│")[1:-1]] for row in rows]
    assert [(c[0], c[1]) for c in cells] == [
        ("context-window-overflow", "passed"),
        ("head-only-restart-with-workers", "failed"),
        ("kv", "skipped"),
    ]


def test_table_shows_lab_seconds_in_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    text = table_at(200, monkeypatch)
    assert "9.0 s [0.090 s lab]" in text
    assert "512.2 s [5.122 s lab]" in text


def test_report_html_reads_durations_as_the_terminal_and_markdown_do() -> None:
    s = scenario_result(
        "x", id="kv", time_to_fail_s=150.0, time_to_detect_s=160.0, time_to_recover_s=300.0
    )
    page = html(run_result(s))
    for text in ("150.0 s [1.500 s lab]", "160.0 s [1.600 s lab]", "300.0 s [3.000 s lab]"):
        assert f"<td>{text}</td>" in page
    assert "(lab " not in page
