"""The report's Gantt picture in headless Debian Chromium, at 1400 px and in a 600 px window: each
recovery step labelled with its role and outcome, a people's lane and a row per action on a
drill's after-action picture, a legend entry for every colour drawn, no lane without a mark in
it, few axis breaks each saying what it leaves out, and no two texts on top of each other.
Built from real recorded results (tests/data/report/): a run of the seven built-ins and a drill
in which a person acknowledged, asked for a hint, took the shortcut and then the fix. The
screenshots are kept in the test's output directory and in reports/test-artefacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.report import write_reports
from runner.report.gantt_layout import MAX_BREAKS
from runner.results.schema import (
    EventKind,
    ImpactFigures,
    LoadBin,
    RunResult,
    TimelineEvent,
    load_result,
)
from tests.integration.runner.test_report_page import DATA, keep, need_browser
from tests.support import browser

WIDE, NARROW = 1400, 600

# what the page draws, measured in the picture's own coordinates
MEASURE_JS = """
const svg = document.querySelector(arguments[0]);
svg.closest('details.scenario').open = true;
svg.scrollIntoView();
const own = e => e.firstChild ? e.firstChild.nodeValue : '';
const box = e => { const b = e.getBBox(); return [b.x, b.y, b.width, b.height]; };
const lanes = Array.from(svg.querySelectorAll('text.lane'), t => [own(t), box(t)]);
// every mark drawn in a lane's row: bars, event dots, steps, people's marks, marker diamonds,
// the requests' strip
const marks = Array.from(svg.querySelectorAll(
    '.bars rect, .ticks circle, .steps rect, .people path, .markers path, .requests rect'), box);
const colours = new Set();
for (const e of svg.querySelectorAll(
    '.bands rect, .bars rect, .ticks circle, .steps rect, .people path, .markers path, ' +
    '.requests rect'))
  colours.add(e.getAttribute('fill'));
for (const e of svg.querySelectorAll('.breaks path, .requests path.latency'))
  colours.add(e.getAttribute('stroke'));
const legend = Array.from(svg.querySelectorAll('.legend-item'),
    e => [e.getAttribute('data-colour'), e.querySelector('text').textContent]);
const texts = Array.from(svg.querySelectorAll('text'), t => [own(t), box(t)]);
const r = svg.getBoundingClientRect();
return {
  lanes, marks, colours: Array.from(colours), legend, texts,
  steps: Array.from(svg.querySelectorAll('.step-label'), own),
  people: Array.from(svg.querySelectorAll('.person-label'), own),
  breaks: svg.querySelectorAll('g.break').length,
  gaps: Array.from(svg.querySelectorAll('.gap-label'), own),
  scale: r.width / svg.viewBox.baseVal.width,
  pageScrolls: document.documentElement.scrollWidth > document.documentElement.clientWidth,
};
"""


def overlaps(texts: list[tuple[str, list[float]]]) -> list[str]:
    """The pairs of texts whose boxes cross (by more than a pixel each way)."""
    out = []
    for i, (a, (ax, ay, aw, ah)) in enumerate(texts):
        for b, (bx, by, bw, bh) in texts[i + 1 :]:
            if ax + 1 < bx + bw and bx + 1 < ax + aw and ay + 1 < by + bh and by + 1 < ay + ah:
                out.append(f"{a!r} on {b!r}")
    return out


def empty_lanes(m: dict[str, Any]) -> list[str]:
    """The lanes no mark's middle falls in."""
    out = []
    for name, (_, y, _, h) in m["lanes"]:
        top, bottom = y + h / 2 - 12, y + h / 2 + 12  # a lane is 24 px, its label in the middle
        if not any(top <= my + mh / 2 <= bottom for _, my, _, mh in m["marks"]):
            out.append(name)
    return out


def check_picture(m: dict[str, Any], steps: list[str]) -> None:
    assert m["steps"] == steps
    assert empty_lanes(m) == []
    legend = {colour for colour, _ in m["legend"]}
    assert sorted(set(m["colours"]) - legend) == []  # every colour drawn is explained
    assert sorted(legend - set(m["colours"])) == []  # and the legend explains nothing else
    assert 1 <= m["breaks"] <= MAX_BREAKS
    assert len(m["gaps"]) == m["breaks"] and all(g.endswith(" s skipped") for g in m["gaps"])
    assert overlaps(m["texts"]) == []


def shoot(driver: Any, css: str, tmp_path: Path, name: str, width: int) -> dict[str, Any]:
    driver.set_window_size(width, 1000)
    m: dict[str, Any] = driver.execute_script(MEASURE_JS, css)
    shot = tmp_path / f"gantt-{name}-{width}.png"
    assert driver.find_element("css selector", css).screenshot(str(shot))
    keep(shot)
    page = tmp_path / f"gantt-{name}-{width}-page.png"
    assert driver.save_screenshot(str(page))
    keep(page)
    assert not m["pageScrolls"]
    # in a narrow window the picture scrolls in its box rather than shrink its text away
    assert m["scale"] >= (1.0 if width == WIDE else 0.75)
    return m


RUN_STEPS = {
    "head-only-restart": [
        "shortcut: Restart the head alone (what `--restart always` would do) "
        "\u2014 did not restore",
        "fix: Restart all four nodes together \u2014 restored",
    ],
    "context-window-overflow": [
        "shortcut: Set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to get past the check "
        "\u2014 did not restore",
        "fix: Put --max-model-len back within max_position_embeddings (re-apply the baseline) "
        "\u2014 restored",
    ],
}


@pytest.mark.parametrize("width", [WIDE, NARROW])
@pytest.mark.parametrize("scenario", sorted(RUN_STEPS))
def test_a_runs_picture_labels_each_step(tmp_path: Path, scenario: str, width: int) -> None:
    need_browser()
    write_reports(load_result(DATA / "seven-passed.json"), tmp_path)
    with browser.chromium() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        m = shoot(driver, f"#{scenario} svg.gantt", tmp_path, scenario, width)
    check_picture(m, RUN_STEPS[scenario])
    assert m["people"] == []


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_a_drills_after_action_picture_shows_what_the_people_did(
    tmp_path: Path, width: int
) -> None:
    need_browser()
    write_reports(load_result(DATA / "drill-recovered.json"), tmp_path)
    with browser.chromium() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        m = shoot(driver, "#head-only-restart svg.gantt", tmp_path, "drill", width)
    check_picture(m, RUN_STEPS["head-only-restart"])
    assert m["people"] == ["acknowledged", "hint 1"]
    assert [name for name, _ in m["lanes"]][:4] == ["runner", "people", "action 1", "action 2"]


def with_load(run: RunResult, scenario: str) -> RunResult:
    """`run` with a load on `scenario`: 10 requests a stretch, one stretch per 1/200 of its
    span, refused from its failure to its restore, with a p99 that grows while it recovers."""
    s = next(x for x in run.scenarios if x.id == scenario)
    marks = {e.kind: e.ts for e in s.timeline if e.kind in (EventKind.FAIL, EventKind.RESTORED)}
    step = (s.finished_at - s.started_at) / 200
    bins = []
    for i in range(200):
        at = s.started_at + step * i
        down = marks[EventKind.FAIL] <= at < marks[EventKind.RESTORED]
        bins.append(
            LoadBin(
                start=at,
                wall_s=step.total_seconds(),
                outcomes={"refused": 9, "timeout": 1} if down else {"ok": 10},
                p99_ms=None if down else 20.0 + i,
            )
        )
    imp = ImpactFigures(mode="open", rate=10, node="node1", phases=[], bins=bins)
    users = TimelineEvent(
        ts=s.started_at, source="users", clock="runner", event="load started: 10 requests/s"
    )
    s = s.model_copy(update={"impact": imp, "timeline": [*s.timeline, users]})
    return run.model_copy(
        update={"scenarios": [s if x.id == scenario else x for x in run.scenarios]}
    )


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_a_runs_picture_shows_its_requests_and_their_latency(tmp_path: Path, width: int) -> None:
    need_browser()
    write_reports(with_load(load_result(DATA / "seven-passed.json"), "head-only-restart"), tmp_path)
    with browser.chromium() as driver:
        driver.get((tmp_path / "report.html").as_uri())
        m = shoot(driver, "#head-only-restart svg.gantt", tmp_path, "requests", width)
    check_picture(m, RUN_STEPS["head-only-restart"])
    names = [name for name, _ in m["lanes"]]
    assert names[names.index("users") + 1] == "requests"
    told = {text for _, text in m["legend"]}
    assert {"request: ok", "request: no connection", "request: timeout"} <= told
    assert "p99 latency of successes (right-hand axis)" in told
    assert [t for t, _ in m["texts"] if t.endswith(" ms") or t == "0"][-2:][0].endswith(" ms")
