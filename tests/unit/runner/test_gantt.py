"""The report's Gantt picture: lanes, incarnation bars, phase bands, markers, brackets and the
broken axis, from events; the kinds an old result.json derives from its texts."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.labs.base import EventType, LabEvent
from runner.report import gantt
from runner.report.gantt_layout import (
    MAX_BREAKS,
    Axis,
    Band,
    Bar,
    BarState,
    Bracket,
    Mark,
    PersonKind,
    StepOutcome,
    StepRole,
    layout,
    quiet_breaks,
)
from runner.results.durations import real_s
from runner.results.schema import (
    Assertion,
    EventKind,
    Phase,
    ScenarioResult,
    TimelineEvent,
    Verdict,
    load_result,
)
from runner.run.record import Recorder

DATA = Path(__file__).parents[2] / "data" / "report"
T0 = datetime(2026, 12, 1, 5, 0, 0, tzinfo=UTC)


def ev(at: float, source: str, text: str, kind: EventKind | None = None) -> TimelineEvent:
    return TimelineEvent(
        ts=T0 + timedelta(seconds=at), source=source, clock="test", event=text, kind=kind
    )


def crash_loop() -> ScenarioResult:
    """A node that crashes, waits out two 300-second back-offs, then serves."""
    events = [
        ev(0, "runner", "phase inject"),
        ev(0.5, "runner", "inject: SIGKILL to n1's engine core"),
        ev(1, "lab:n1", "exited with code 1 (incarnation 1)"),
        ev(1, "lab:n1", "failure observed (exit 1)"),
        ev(2, "lab:n1", "back-off 300.000 s (restarts 1)"),
        ev(302, "lab:n1", "started incarnation 2 pid 10"),
        ev(303, "lab:n1", "exited with code 1 (incarnation 2)"),
        ev(304, "lab:n1", "back-off 300.000 s (restarts 2)"),
        ev(600, "runner", "phase recover"),
        ev(604, "lab:n1", "started incarnation 3 pid 11"),
        ev(605, "lab:n1", "ready"),
        ev(606, "runner", "service verified (health and inference)"),
    ]
    return ScenarioResult(
        id="crash-loop",
        title="a crash loop",
        file="scenarios/crash-loop.yaml",
        lab="local",
        verdict=Verdict.PASSED,
        time_to_fail_s=0.5,
        time_to_recover_s=2.0,
        started_at=T0,
        finished_at=T0 + timedelta(seconds=606),
        assertions=[],
        timeline=events,
        evidence=[],
        notes=[],
    )


def test_a_crash_loop_is_a_lane_of_bars_with_its_back_offs_on_a_broken_axis() -> None:
    lay = layout(crash_loop(), 1.0)
    assert lay.lanes == ("runner", "n1")  # Prometheus had nothing to say: no lane
    assert lay.span_s == 606.0
    assert lay.breaks == ((2.0, 302.0), (304.0, 600.0))
    assert lay.bars == (
        Bar("n1", 0.0, 1.0, BarState.RUNNING, 1),
        Bar("n1", 1.0, 2.0, BarState.CRASHED, 1),
        Bar("n1", 2.0, 302.0, BarState.BACKOFF, 1),
        Bar("n1", 302.0, 303.0, BarState.STARTING, 2),
        Bar("n1", 303.0, 304.0, BarState.CRASHED, 2),
        Bar("n1", 304.0, 604.0, BarState.BACKOFF, 2),
        Bar("n1", 604.0, 605.0, BarState.STARTING, 3),
        Bar("n1", 605.0, 606.0, BarState.RUNNING, 3),
    )
    assert lay.bands == (
        Band("inject", 0.0, 600.0, "phase inject"),
        Band("recover", 600.0, 606.0, "phase recover"),
    )
    assert [(m.kind, m.lane, m.at_s) for m in lay.marks] == [
        (EventKind.INJECT, "runner", 0.5),
        (EventKind.FAIL, "n1", 1.0),
        (EventKind.RESTORED, "runner", 606.0),
    ]
    assert lay.brackets == (
        Bracket("time to fail", 0.5, 1.0),
        Bracket("time to recover", 604.0, 606.0),
    )


def test_the_axis_gives_a_compressed_gap_a_fixed_width_and_shares_the_rest() -> None:
    axis = Axis(100.0, 1100.0, 604.0, ((2.0, 302.0), (303.0, 603.0)))
    # 1000 px, two breaks of 44 px: 912 px for the 4 s not compressed, 228 px a second
    assert axis.px_per_s == 228.0
    assert [axis.x(t) for t in (0, 2, 152, 302, 303, 603, 604)] == [
        100.0,
        556.0,
        578.0,
        600.0,
        828.0,
        872.0,
        1100.0,
    ]


def test_only_gaps_long_against_the_usual_gap_are_compressed() -> None:
    assert quiet_breaks([0, 1, 2, 302, 303, 603, 604], 604.0) == ((2.0, 302.0), (303.0, 603.0))
    # events spread evenly keep a linear axis
    assert quiet_breaks([0, 40, 60, 100], 100.0) == ()
    # 9 s is never compressed, however short the rest
    assert quiet_breaks([0, 0.1, 0.2, 9.2], 9.2) == ()
    assert quiet_breaks([0, 1, 2, 3, 100, 101, 102], 102.0) == ((3.0, 100.0),)


def test_times_are_real_world_seconds_with_the_labs_in_brackets() -> None:
    lay = layout(crash_loop(), 100.0)  # the lab ran 6.06 s, the real world 606 s
    assert lay.span_s == 60600.0
    assert real_s(15.388, 100.0) == "15.4 s [0.154 s lab]"
    assert real_s(15.388, 1.0) == "15.4 s"
    assert real_s(60600.0, 100.0) == "60600.0 s [606.000 s lab]"


def test_a_real_four_node_restart_has_a_lane_per_node_and_its_incarnations() -> None:
    run = load_result(DATA / "seven-passed.json")
    s = next(s for s in run.scenarios if s.id == "head-only-restart")
    lay = layout(s, run.lab.time_scale)
    assert lay.lanes == (
        "runner",
        "recover 1",
        "recover 2",
        "node1",
        "node2",
        "node3",
        "node4",
        "prometheus",
    )
    assert [b for b in lay.bars if b.lane == "node2"] == [
        Bar("node2", 0.0, 955.2502, BarState.RUNNING, 1),
        Bar("node2", 955.2502, 959.2152, BarState.STOPPED, 1),
        Bar("node2", 959.2152, 976.1522, BarState.STARTING, 2),
        Bar("node2", 976.1522, 1097.1467, BarState.RUNNING, 2),
    ]
    assert [(m.kind.value, m.lane, m.at_s) for m in lay.marks] == [
        ("inject", "runner", 3.5979),
        ("fail", "node1", 19.4329),
        ("alert", "prometheus", 317.0232),
        ("restored", "runner", 1096.7995),
    ]
    assert [b.name for b in lay.brackets] == ["time to fail", "time to detect", "time to recover"]
    assert lay.brackets[0] == Bracket("time to fail", pytest.approx(4.0449), 19.4329)


def test_the_svg_has_a_lane_label_per_node_and_escapes_every_text() -> None:
    s = crash_loop()
    evil = ev(3, "lab:n1", "log: <script>alert(1)</script> & more")
    s = s.model_copy(update={"timeline": [*s.timeline, evil]})
    svg = gantt.svg(layout(s, 1.0), "timeline of crash-loop")
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert [t.text for t in root.iterfind(".//s:text[@class='lane']", ns)] == ["runner", "n1"]
    assert len(root.findall(".//s:rect[@class='bar crashed']", ns)) == 2
    assert len(root.findall(".//s:g[@class='bracket']", ns)) == 2
    assert len(root.findall(".//s:g[@class='break']", ns)) == 2
    gaps = [t.text for t in root.iterfind(".//s:text[@class='gap-label']", ns)]
    assert gaps == ["299 s skipped", "296 s skipped"]  # the line at 3 s ends the first silence
    assert "<script>" not in svg and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in svg
    titles = [t.text for t in root.iterfind(".//s:g[@class='bracket']/s:title", ns)]
    assert titles == [
        "time to fail 0.5 s: +0.5 s to +1.0 s",
        "time to recover 2.0 s: +604.0 s to +606.0 s",
    ]
    # at the right edge the label goes left of its bracket, anchored at its end: it meets the
    # bracket whatever widths the reader's font gives its letters
    recover = root.findall(".//s:g[@class='bracket']", ns)[1]
    path = recover.find("s:path", ns)
    label = recover.find("s:text", ns)
    assert path is not None and label is not None
    x0 = float(path.attrib["d"].split(",")[0][1:])
    assert label.attrib["text-anchor"] == "end"
    assert float(label.attrib["x"]) == pytest.approx(x0 - 6, abs=0.06)


@pytest.mark.parametrize(
    ("source", "text", "kind", "node"),
    [
        ("runner", "phase verify (recover 2: restart all)", EventKind.PHASE, None),
        ("runner", "inject: node1: args --a 1 -> --a 2", EventKind.INJECT, None),
        ("lab:node1", "failure observed (exit 0)", EventKind.FAIL, "node1"),
        ("prometheus", "alert ServingDown firing", EventKind.ALERT, None),
        ("runner", "service verified (health and inference)", EventKind.RESTORED, None),
        ("lab:node4", "started incarnation 2 pid 31974", EventKind.STARTED, "node4"),
        (
            "lab:node4",
            "stopped by the lab to re-apply (exit 0, incarnation 1)",
            EventKind.EXITED,
            "node4",
        ),
        ("lab:node1", "ready", EventKind.READY, "node1"),
        ("lab:node1", "unready", EventKind.UNREADY, "node1"),
        ("lab:n", "back-off 10.000 s (restarts 1)", EventKind.BACKOFF, "n"),
        ("log:node2", "log: [rank1] Failed to check", EventKind.LOG, "node2"),
        ("runner", "recover 1: restart node1 (together)", EventKind.STEP, None),
        ("runner", "baseline serving again", EventKind.NOTE, None),
    ],
)
def test_an_old_results_event_derives_its_kind_and_node(
    source: str, text: str, kind: EventKind, node: str | None
) -> None:
    old = {"ts": T0.isoformat(), "source": source, "clock": "c", "event": text}
    e = TimelineEvent.model_validate(old)
    assert (e.kind, e.node) == (kind, node)


def test_a_lab_event_is_recorded_with_its_kind_and_node() -> None:
    rec = Recorder()
    rec.lab_event(
        LabEvent(seq=1, ts=T0, node="n1", type=EventType.BACKOFF, delay_s=300.0, restarts=2)
    )
    rec.lab_event(LabEvent(seq=2, ts=T0, node="n1", type=EventType.AUX_STARTED, name="stray"))
    assert [(e.event, e.kind, e.node) for e in rec.timeline] == [
        ("back-off 300.000 s (restarts 2)", EventKind.BACKOFF, "n1"),
        ("aux_started", EventKind.PROCESS, "n1"),
    ]


def test_marks_keep_the_first_of_each_kind() -> None:
    s = crash_loop()
    later = ev(305, "runner", "failure observed (silent: seen by the probes)")
    lay = layout(s.model_copy(update={"timeline": [*s.timeline, later]}), 1.0)
    assert Mark("n1", 1.0, EventKind.FAIL, "failure observed (exit 1)") in lay.marks
    assert len(lay.marks) == 3


def _svg_root(s: ScenarioResult, scale: float = 1.0) -> ET.Element:
    return ET.fromstring(gantt.svg(layout(s, scale), "timeline"))


NS = {"s": "http://www.w3.org/2000/svg"}


def test_each_recovery_step_is_a_row_labelled_with_its_role_and_outcome() -> None:
    run = load_result(DATA / "seven-passed.json")
    s = next(s for s in run.scenarios if s.id == "head-only-restart")
    lay = layout(s, run.lab.time_scale)
    # from its first event to the next step's; the fix to the service verified after it
    head_alone = "Restart the head alone (what `--restart always` would do)"
    assert [(st.row, st.start_s, st.end_s, st.role, st.name, st.outcome) for st in lay.steps] == [
        ("recover 1", 488.7845, 950.9046, StepRole.SHORTCUT, head_alone, StepOutcome.NOT_RESTORED),
        (
            "recover 2",
            950.9046,
            1096.7995,
            StepRole.FIX,
            "Restart all four nodes together",
            StepOutcome.RESTORED,
        ),
    ]
    assert lay.steps[0].detail.startswith("not restored: node running, ready=False")
    labels = [t.text for t in _svg_root(s, run.lab.time_scale).iterfind(".//s:text", NS)]
    assert "fix: Restart all four nodes together \u2014 restored" in labels
    assert (
        "shortcut: Restart the head alone (what `--restart always` would do) \u2014 did not restore"
        in labels
    )


def _with_step_checks(*checks: tuple[str, Verdict]) -> ScenarioResult:
    s = crash_loop()
    events = [
        *s.timeline,
        ev(600.5, "runner", "recover 1: restart n1 (together)"),
        ev(601, "runner", "recover 2: n1: args --a 1 -> --a 2"),
        ev(602, "runner", "phase verify (recover 2: fix it)"),
    ]
    asserts = [
        Assertion(name=n, phase=Phase.RECOVER, verdict=v, expected="", observed="")
        for n, v in checks
    ]
    return s.model_copy(update={"timeline": events, "assertions": asserts})


def test_a_shortcut_that_worked_and_a_fix_that_did_not_say_so() -> None:
    s = _with_step_checks(
        ("recover 1: Restart: the pod: does NOT restore service", Verdict.FAILED),
        ("recover 2: fix it: restores service", Verdict.FAILED),
    )
    lay = layout(s, 1.0)
    assert [(st.row, st.label, st.start_s, st.end_s) for st in lay.steps] == [
        ("recover 1", "shortcut: Restart: the pod \u2014 restored", 600.5, 601.0),
        ("recover 2", "fix: fix it \u2014 did not restore", 601.0, 606.0),
    ]
    masks = _with_step_checks(
        ("recover 1: hide it: masks the symptom (the probes pass)", Verdict.PASSED),
    )
    assert [st.label for st in layout(masks, 1.0).steps] == [
        "shortcut: hide it \u2014 masked the symptom"
    ]


def test_breaks_are_few_long_and_never_side_by_side() -> None:
    times = [0, 1, 2, 100, 101, 300, 320, 321, 500, 501, 700, 701, 702]
    breaks = quiet_breaks(times, 702.0)
    assert len(breaks) <= MAX_BREAKS == 3
    assert breaks == ((101.0, 300.0), (321.0, 500.0), (501.0, 700.0))
    # (2, 100) is a long silence too, but a tenth of the span at least is what a break saves
    assert quiet_breaks([0, 1, 2, 60, 61, 2000, 2001], 2001.0) == ((61.0, 2000.0),)
    # an event alone between two silences: only the longer of the two is compressed
    assert quiet_breaks([0, 1, 2, 402, 1002, 1003], 1003.0) == ((402.0, 1002.0),)


def test_a_stopped_node_is_a_bar_and_every_colour_drawn_is_in_the_legend() -> None:
    s = crash_loop()
    stop = [
        ev(606.5, "lab:n1", "stopped by the lab to re-apply (exit 0, incarnation 3)"),
        ev(607, "lab:n1", "started incarnation 4 pid 12"),
    ]
    s = s.model_copy(
        update={"timeline": [*s.timeline, *stop], "finished_at": T0 + timedelta(seconds=608)}
    )
    lay = layout(s, 1.0)
    assert Bar("n1", 606.5, 607.0, BarState.STOPPED, 3) in lay.bars
    root = _svg_root(s)
    drawn = {
        e.attrib["fill"]
        for css in ("bands/s:rect", "bars/s:rect", "ticks/s:circle", "markers/s:g/s:path")
        for e in root.iterfind(f".//s:g[@class='{css.split('/')[0]}']/" + css.split("/", 1)[1], NS)
    }
    drawn |= {e.attrib["stroke"] for e in root.iterfind(".//s:g[@class='break']/s:path", NS)}
    legend = {
        e.attrib["data-colour"]: e.find("s:text", NS).text  # type: ignore[union-attr]
        for e in root.iterfind(".//s:g[@class='legend']/s:g", NS)
    }
    assert set(legend) == drawn
    assert {"stopped", "crashed", "back-off", "phase inject"} <= set(legend.values())
    assert "unready" not in legend.values()  # nothing was unready: not explained


def test_a_drill_shows_the_people_and_each_action_they_took() -> None:
    run = load_result(DATA / "drill-recovered.json")
    [s] = run.scenarios
    assert s.drill is not None and s.drill.fault_at is not None
    lay = layout(s, run.lab.time_scale)
    assert lay.lanes[:4] == ("runner", "people", "action 1", "action 2")
    assert "prometheus" not in lay.lanes  # no event of its own in a drill
    fault = (s.drill.fault_at - s.started_at).total_seconds() * 100
    assert [(p.kind, p.text, p.at_s) for p in lay.people] == [
        (PersonKind.ACK, "acknowledged", pytest.approx(fault + 784.3)),
        (PersonKind.HINT, "hint 1", pytest.approx(fault + 1641.5)),
    ]
    assert [(st.row, st.label) for st in lay.steps] == [
        (
            "action 1",
            "shortcut: Restart the head alone (what `--restart always` would do) "
            "\u2014 did not restore",
        ),
        ("action 2", "fix: Restart all four nodes together \u2014 restored"),
    ]
    assert lay.steps[0].start_s == pytest.approx(fault + 1032.6)
    assert lay.steps[0].end_s == lay.steps[1].start_s == pytest.approx(fault + 1958.1)
    assert lay.steps[1].end_s == pytest.approx(fault + 2098.6)  # service back
    root = _svg_root(s, run.lab.time_scale)
    assert [t.text for t in root.iterfind(".//s:text[@class='person-label']", NS)] == [
        "acknowledged",
        "hint 1",
    ]
    # a record written before the fault's time was kept places it at the last injection
    old = s.model_copy(update={"drill": s.drill.model_copy(update={"fault_at": None})})
    inject = next(e for e in s.timeline if e.kind is EventKind.INJECT)
    at = (inject.ts - s.started_at).total_seconds() * 100
    assert layout(old, 100.0).people[0].at_s == pytest.approx(at + 784.3)


def _with_requests(s: ScenarioResult) -> ScenarioResult:
    """`s` with a load: 1-second stretches from +0 to +700 s; from +250 s to +304 s the
    requests are refused, one times out at +302 s, and one gets an error status at +303 s."""
    from runner.results.schema import ImpactFigures, LoadBin

    bins = []
    for i in range(700):
        outcomes = {"ok": 10}
        if 250 <= i < 304:
            outcomes = {"refused": 10 - (i in (302, 303)), "ok": 0}
            outcomes |= {"timeout": 1} if i == 302 else {"http_error": 1} if i == 303 else {}
        outcomes = {k: n for k, n in outcomes.items() if n}
        p99 = None if "ok" not in outcomes else 10.0 + i % 7
        bins.append(
            LoadBin(start=T0 + timedelta(seconds=i), wall_s=1.0, outcomes=outcomes, p99_ms=p99)
        )
    imp = ImpactFigures(mode="open", rate=10, node="n1", phases=[], bins=bins)
    users = [ev(0, "users", "load started: 10 requests/s to n1"), ev(700, "users", "load stopped")]
    return s.model_copy(update={"impact": imp, "timeline": [*s.timeline, *users]})


def test_the_requests_lane_shows_outcomes_and_p99_latency_on_its_own_axis() -> None:
    from runner.report.gantt_layout import REQUESTS, Answer

    s = _with_requests(crash_loop())
    lay = layout(s, 1.0)
    assert lay.lanes[lay.lanes.index("users") + 1] == REQUESTS
    # the axis's breaks hide the stretches under them: none is drawn there
    assert lay.breaks and all(not (a <= b.start_s < z) for b in lay.requests for a, z in lay.breaks)
    assert len(lay.requests) < 700
    assert lay.breaks[0] == (2.0, 302.0)  # the crash loop's first back-off
    failing = [b for b in lay.requests if 250 <= b.start_s < 304]
    assert [b.answers for b in failing] == [
        ((Answer.TIMEOUT, 1), (Answer.NO_CONNECTION, 9)),
        ((Answer.ERROR, 1), (Answer.NO_CONNECTION, 9)),
    ]
    root = _svg_root(s)
    strip = root.find(".//s:g[@class='requests']", NS)
    assert strip is not None
    fills = {e.attrib["fill"] for e in strip.iterfind("s:g/s:rect", NS)}
    # every column is as high as the strip, its shares stacked
    for col in strip.iterfind("s:g[@class='request-bin']", NS):
        assert sum(float(r.attrib["height"]) for r in col.iterfind("s:rect", NS)) == (
            pytest.approx(gantt.STRIP_H, abs=0.5)
        )
    tip = strip.find("s:g[@class='request-bin']/s:title", NS)
    assert tip is not None and tip.text == "+0.0 s: 10 sent: 10 ok; p99 10.0 ms"
    # the latency line ends where no request succeeded (+302, +303) and at the axis's breaks:
    # +0 to +1, then +600 to +605 (the third break hides the rest)
    line = strip.find("s:path[@class='latency']", NS)
    assert line is not None
    runs = line.attrib["d"].split("M")[1:]
    assert [r.count("L") + 1 for r in runs] == [2, 6]
    labels = [t.text for t in strip.iterfind(".//s:text[@class='latency-label']", NS)]
    assert labels == ["16 ms", "0"]  # its own axis: 0 to the largest p99 drawn
    legend = {
        e.attrib["data-colour"]: e.find("s:text", NS).text  # type: ignore[union-attr]
        for e in root.iterfind(".//s:g[@class='legend']/s:g", NS)
    }
    drawn = fills | {line.attrib["stroke"]}
    assert {c: t for c, t in legend.items() if c in drawn} == {
        gantt.ANSWER_COLOURS[Answer.OK]: "request: ok",
        gantt.ANSWER_COLOURS[Answer.ERROR]: "request: error answer",
        gantt.ANSWER_COLOURS[Answer.TIMEOUT]: "request: timeout",
        gantt.ANSWER_COLOURS[Answer.NO_CONNECTION]: "request: no connection",
        gantt.LATENCY_COLOUR: "p99 latency of successes (right-hand axis)",
    }
    # and a legend entry for nothing not drawn: without failures, only ok
    calm = s.model_copy(
        update={
            "impact": s.impact.model_copy(  # type: ignore[union-attr]
                update={
                    "bins": [
                        b for b in s.impact.bins if "ok" in b.outcomes and len(b.outcomes) == 1
                    ]
                }  # type: ignore[union-attr]
            )
        }
    )
    texts = [
        e.find("s:text", NS).text  # type: ignore[union-attr]
        for e in _svg_root(calm).iterfind(".//s:g[@class='legend']/s:g", NS)
    ]
    assert [t for t in texts if t and t.startswith("request")] == ["request: ok"]


def test_a_result_without_load_has_no_requests_lane() -> None:
    from runner.report.gantt_layout import REQUESTS

    lay = layout(crash_loop(), 1.0)
    assert REQUESTS not in lay.lanes and lay.requests == ()
    assert 'class="requests"' not in gantt.svg(lay, "t")


def test_the_load_s_bins_count_requests_by_send_time_in_at_most_max_bins() -> None:
    from runner.run.impact import MAX_BINS, load_bins
    from tests.unit.runner.run.test_impact import _sent

    sent = [_sent(100 + i * 0.01, ok=i % 4 != 0, took=0.02) for i in range(3000)]
    bins = load_bins(sent)
    assert len(bins) == MAX_BINS
    assert sum(sum(b.outcomes.values()) for b in bins) == 3000
    assert bins[0].start.timestamp() == pytest.approx(100.0)
    assert bins[0].outcomes == {"ok": 15, "refused": 5}  # 30 s / 150 = 0.2 s: 20 requests
    assert bins[0].p99_ms == pytest.approx(20.0)
    assert load_bins([]) == []
