"""A scenario's timeline as a Gantt chart, laid out: `layout` turns the recorded events into
lanes, phase bands, incarnation bars, markers and brackets on an axis of real-world seconds
(runner.report.gantt draws it).

One lane each for the runner, every node, Prometheus and any other source (ansible) that has an
event; a row per recovery step, labelled with what it is (fix or shortcut) and what came of it;
and in a drill, the people's lane (acknowledgement, hints) and a row per action they took, from
the drill's record. The axis is broken where a long quiet gap would squeeze the rest: such a gap
takes a fixed BREAK_PX and is marked, so seconds-long bursts and a 300-second back-off share a
picture. Breaks are few (MAX_BREAKS, each a tenth of the span at least, never two side by side):
a picture with many reads as a ruler.
"""

from __future__ import annotations

import enum
import itertools
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from runner.results.schema import (
    DrillRecord,
    EventKind,
    ScenarioResult,
    TimelineEvent,
    Verdict,
)
from runner.spec.kinds import Outcome

RUNNER = "runner"
PROMETHEUS = "prometheus"
PEOPLE = "people"
USERS = "users"  # runner.run.impact's lane of the load's events
REQUESTS = "requests"  # the load's requests over time, under the users' lane
WIDTH = 1100  # px of the whole picture
BREAK_PX = 44.0  # px a compressed quiet gap takes
MIN_QUIET_S = 10.0  # real seconds: a shorter gap is never compressed
QUIET_FACTOR = 10.0  # a gap this many times the median gap is quiet
MAX_BREAKS = 3
MIN_BREAK_SHARE = 0.1  # of the span: compressing less saves too little to be worth a break


class BarState(enum.StrEnum):
    STARTING = "starting"  # started, not ready yet
    RUNNING = "running"  # ready
    UNREADY = "unready"
    CRASHED = "crashed"  # exited on its own, not restarted yet
    BACKOFF = "back-off"  # the runtime waits before the next start
    STOPPED = "stopped"  # stopped (by the lab, to re-apply, or by a person), not started yet


@dataclass(frozen=True)
class Bar:
    lane: str
    start_s: float
    end_s: float
    state: BarState
    incarnation: int | None


@dataclass(frozen=True)
class Band:
    phase: str
    start_s: float
    end_s: float
    text: str


@dataclass(frozen=True)
class Mark:
    """A point event: the four markers (inject, fail, first alert, restored) and every other
    event as a tick in its lane."""

    lane: str
    at_s: float
    kind: EventKind
    text: str


class StepRole(enum.StrEnum):
    FIX = "fix"  # a step the scenario says restores service
    SHORTCUT = "shortcut"  # one it says does not (or only masks the symptom)
    ACTION = "action"  # a person's action that matches no step of the scenario


class StepOutcome(enum.StrEnum):
    RESTORED = "restored"
    NOT_RESTORED = "did not restore"
    MASKED = "masked the symptom"


@dataclass(frozen=True)
class Step:
    """A recovery step (a run's, or an action a person took in a drill) on its own row, from
    when it began to when the next began (or service came back)."""

    row: str  # "recover 1", "action 2"
    start_s: float
    end_s: float
    role: StepRole
    name: str
    outcome: StepOutcome
    detail: str = ""  # for the hover text

    @property
    def label(self) -> str:
        return f"{self.role.value}: {self.name} \u2014 {self.outcome.value}"


class PersonKind(enum.StrEnum):
    ACK = "acknowledged"
    HINT = "hint"


@dataclass(frozen=True)
class PersonMark:
    at_s: float
    kind: PersonKind
    text: str  # "hint 1 (asked for)"
    detail: str = ""  # the hint's text


@dataclass(frozen=True)
class Bracket:
    name: str  # "time to fail"
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Axis:
    """Real-world seconds to x. `breaks`: the compressed gaps (start_s, end_s)."""

    x0: float
    x1: float
    span_s: float
    breaks: tuple[tuple[float, float], ...]

    @property
    def px_per_s(self) -> float:
        linear_s = self.span_s - sum(b - a for a, b in self.breaks)
        linear_px = self.x1 - self.x0 - BREAK_PX * len(self.breaks)
        return linear_px / linear_s if linear_s > 0 else 0.0

    def x(self, t: float) -> float:
        t = min(max(t, 0.0), self.span_s)
        skipped, n_before = 0.0, 0
        for a, b in self.breaks:
            if t >= b:
                skipped += b - a
                n_before += 1
            elif t > a:  # inside a break: spread over its BREAK_PX
                base = self.x0 + (a - skipped) * self.px_per_s + BREAK_PX * n_before
                return base + BREAK_PX * (t - a) / (b - a)
        return self.x0 + (t - skipped) * self.px_per_s + BREAK_PX * n_before


class Answer(enum.StrEnum):
    """How a request came out, as the picture colours it (runner.run.traffic.Outcome, grouped
    by what its user met)."""

    OK = "ok"
    ERROR = "error answer"  # an error status, an error in the stream, a body not the API's
    TIMEOUT = "timeout"
    NO_CONNECTION = "no connection"  # refused, reset, no address, another transport failure


ANSWER_OF = {
    "ok": Answer.OK,
    "http_error": Answer.ERROR,
    "stream_error": Answer.ERROR,
    "bad_answer": Answer.ERROR,
    "timeout": Answer.TIMEOUT,
    "refused": Answer.NO_CONNECTION,
    "reset": Answer.NO_CONNECTION,
    "transport_error": Answer.NO_CONNECTION,
    "no_address": Answer.NO_CONNECTION,
}


@dataclass(frozen=True)
class RequestBin:
    """The requests sent from `start_s` to `end_s` (real-world seconds), counted by how they
    came out, and the p99 latency of those that succeeded (wall milliseconds)."""

    start_s: float
    end_s: float
    answers: tuple[tuple[Answer, int], ...]  # in Answer's order, none zero
    p99_ms: float | None

    @property
    def sent(self) -> int:
        return sum(n for _, n in self.answers)


@dataclass(frozen=True)
class Layout:
    lanes: tuple[str, ...]
    span_s: float
    breaks: tuple[tuple[float, float], ...]
    bands: tuple[Band, ...]
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]  # the four markers, first of each kind, in time order
    ticks: tuple[Mark, ...]  # every event
    brackets: tuple[Bracket, ...]
    time_scale: float
    steps: tuple[Step, ...] = ()
    people: tuple[PersonMark, ...] = ()
    requests: tuple[RequestBin, ...] = ()  # outside the axis's breaks only


def _request_bins(s: ScenarioResult, t0: datetime, scale: float, span: float) -> list[RequestBin]:
    """The load's stretches on the axis (a stretch past the picture's end is left out)."""
    out = []
    for b in s.impact.bins if s.impact else []:
        start = _real_s(b.start, t0, scale)
        if start >= span:
            continue
        counts: dict[Answer, int] = {}
        for outcome, n in b.outcomes.items():
            a = ANSWER_OF.get(outcome, Answer.NO_CONNECTION)  # an outcome unknown here fails
            counts[a] = counts.get(a, 0) + n
        answers = tuple((a, counts[a]) for a in Answer if counts.get(a))
        end = min(start + b.wall_s * scale, span)
        out.append(RequestBin(start, end, answers, b.p99_ms))
    return out


def _outside(
    bins: list[RequestBin], breaks: tuple[tuple[float, float], ...]
) -> tuple[RequestBin, ...]:
    """The stretches the axis shows: one that starts inside a break is under its shading."""
    return tuple(b for b in bins if not any(a <= b.start_s < z for a, z in breaks))


MARKERS = {
    EventKind.INJECT: "inject",
    EventKind.FAIL: "fail",
    EventKind.ALERT: "first alert",
    EventKind.RESTORED: "restored",
}


def lane_of(e: TimelineEvent) -> str:
    if e.node is not None:
        return e.node
    return e.source


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def lanes(events: Iterable[TimelineEvent]) -> tuple[str, ...]:
    """The runner first, the nodes in natural order, Prometheus, then any other source: each
    only if it has an event (an empty lane is a row to read for nothing)."""
    evs = list(events)
    has = {lane_of(e) for e in evs}
    nodes = sorted({e.node for e in evs if e.node is not None}, key=_natural)
    others = sorted(has - {RUNNER, PROMETHEUS, *nodes})
    return tuple(n for n in (RUNNER, *nodes, PROMETHEUS, *others) if n in has)


def quiet_breaks(times: Iterable[float], span_s: float) -> tuple[tuple[float, float], ...]:
    """The gaps between consecutive event times to compress: those longer than MIN_QUIET_S,
    QUIET_FACTOR times the median gap (where events bunch, a long silence is compressed; evenly
    spread events keep a linear axis) and MIN_BREAK_SHARE of the span; the longest MAX_BREAKS
    of them, leaving out one that meets a longer one (two breaks side by side read as ticks)."""
    ts = sorted({0.0, span_s, *times})
    gaps = [(a, b) for a, b in itertools.pairwise(ts)]
    if not gaps:
        return ()
    median = statistics.median(b - a for a, b in gaps)
    least = max(MIN_QUIET_S, QUIET_FACTOR * median, MIN_BREAK_SHARE * span_s)
    quiet = sorted(((a, b) for a, b in gaps if b - a > least), key=lambda g: g[0] - g[1])
    chosen: list[tuple[float, float]] = []
    for a, b in quiet:
        if len(chosen) == MAX_BREAKS:
            break
        if not any(a == d or b == c for c, d in chosen):
            chosen.append((a, b))
    return tuple(sorted(chosen))


_INCARNATION = re.compile(r"incarnation (\d+)")


def _bars(lane: str, events: list[tuple[float, TimelineEvent]], end_s: float) -> list[Bar]:
    """A node's incarnations from its lifecycle events. A node whose first lifecycle event is
    not a start was running when the scenario began (the baseline had it serving)."""
    life = [(t, e) for t, e in events if e.kind in _LIFECYCLE]
    out: list[Bar] = []
    cur: tuple[BarState, float, int | None] | None = None
    if life and life[0][1].kind is not EventKind.STARTED:
        cur = (BarState.RUNNING, 0.0, None)

    def close(t: float, inc: int | None = None) -> None:
        """`inc`: the incarnation the closing event names (a bar from before the scenario
        learns its number from it)."""
        if cur is not None and t > cur[1]:
            out.append(Bar(lane, cur[1], t, cur[0], cur[2] if cur[2] is not None else inc))

    for t, e in life:
        m = _INCARNATION.search(e.event)
        inc = int(m.group(1)) if m else (cur[2] if cur else None)
        nxt: tuple[BarState, float, int | None] | None
        if e.kind is EventKind.STARTED:
            nxt = (BarState.STARTING, t, inc)
        elif e.kind is EventKind.READY:
            nxt = (BarState.RUNNING, t, inc)
        elif e.kind is EventKind.UNREADY:
            nxt = (BarState.UNREADY, t, inc) if cur else None
        elif e.kind is EventKind.EXITED:
            stopped = e.event.startswith("stopped by the lab")
            nxt = (BarState.STOPPED if stopped else BarState.CRASHED, t, inc)
        else:  # BACKOFF
            nxt = (BarState.BACKOFF, t, inc)
        if nxt is not None and cur is not None and nxt[0] is cur[0]:
            continue  # no change of state
        close(t, inc)
        cur = nxt
    close(end_s)
    return out


_LIFECYCLE = {
    EventKind.STARTED,
    EventKind.READY,
    EventKind.UNREADY,
    EventKind.EXITED,
    EventKind.BACKOFF,
}


def _brackets(s: ScenarioResult, marks: dict[EventKind, Mark]) -> list[Bracket]:
    """Each measured time, ending at the marker it was measured to."""
    out = []
    for name, value, kind in (
        ("time to fail", s.time_to_fail_s, EventKind.FAIL),
        ("time to detect", s.time_to_detect_s, EventKind.ALERT),
        ("time to recover", s.time_to_recover_s, EventKind.RESTORED),
    ):
        if value is not None and kind in marks:
            end = marks[kind].at_s
            out.append(Bracket(name, max(end - value, 0.0), end))
    return out


_STEP_CHECK = re.compile(
    r"recover (\d+): (.+): "
    r"(restores service|does NOT restore service|masks the symptom \(the probes pass\))$"
)


def _claims(s: ScenarioResult) -> dict[int, tuple[str, StepRole, StepOutcome, str]]:
    """Each recovery step's name, role and outcome, from the check the recover phase made of
    it (what the step claimed, and whether that held): {step number: (name, role, outcome,
    observed)}."""
    out: dict[int, tuple[str, StepRole, StepOutcome, str]] = {}
    for a in s.assertions:
        m = _STEP_CHECK.match(a.name)
        if m is None:
            continue
        held = a.verdict is Verdict.PASSED
        role, yes, no = {
            "restores service": (StepRole.FIX, StepOutcome.RESTORED, StepOutcome.NOT_RESTORED),
            "does NOT restore service": (
                StepRole.SHORTCUT,
                StepOutcome.NOT_RESTORED,
                StepOutcome.RESTORED,
            ),
        }.get(m.group(3), (StepRole.SHORTCUT, StepOutcome.MASKED, StepOutcome.NOT_RESTORED))
        out.setdefault(int(m.group(1)), (m.group(2), role, yes if held else no, a.observed))
    return out


def _run_steps(
    s: ScenarioResult, timed: list[tuple[float, TimelineEvent]], span: float
) -> list[Step]:
    """The recovery steps the runner took: each from its first event to the next step's (a
    restoring one to the service verified after it; the last at the latest to the cleanup)."""
    claims = _claims(s)
    firsts: dict[int, float] = {}
    for t, e in timed:
        m = re.match(r"recover (\d+): ", e.event)
        if e.kind is EventKind.STEP and m and int(m.group(1)) not in firsts:
            firsts[int(m.group(1))] = t
    recover_at = next((t for t, e in timed if e.event == "phase recover"), 0.0)
    starts, at = {}, recover_at
    for i in sorted(claims):
        at = starts[i] = firsts.get(i, at)
    out = []
    order = sorted(claims)
    for k, i in enumerate(order):
        start = starts[i]
        later = [starts[j] for j in order[k + 1 :]]
        later += [t for t, e in timed if t > start and e.event == "phase cleanup"]
        name, role, outcome, observed = claims[i]
        if outcome is StepOutcome.RESTORED:
            later += [t for t, e in timed if t >= start and e.kind is EventKind.RESTORED]
        end = min([*later, span])
        out.append(Step(f"recover {i}", start, max(end, start), role, name, outcome, observed))
    return out


def _fault_s(
    d: DrillRecord, timed: list[tuple[float, TimelineEvent]], t0: datetime, k: float
) -> float:
    """Where the drill's clock starts on the axis: the fault in place (an older record without
    it: the last injection's event)."""
    if d.fault_at is not None:
        return _real_s(d.fault_at, t0, k)
    return max((t for t, e in timed if e.kind is EventKind.INJECT), default=0.0)


def _drill_steps(d: DrillRecord, fault_s: float, scale: float, span: float) -> list[Step]:
    """The people's actions, each on its row until their next one: restored if the service came
    back before that (the drill's times are wall seconds since the fault)."""
    back = None if d.time_to_recover_s is None else fault_s + d.time_to_recover_s * scale
    starts = [fault_s + a.at_s * scale for a in d.actions]
    out = []
    for k, a in enumerate(d.actions):
        start, nxt = starts[k], (starts[k + 1] if k + 1 < len(starts) else span)
        restored = back is not None and start <= back <= nxt
        role = (
            StepRole.SHORTCUT
            if a.shortcut
            else StepRole.FIX
            if a.outcome is Outcome.RESTORES
            else StepRole.ACTION
        )
        what = f"{a.kind.value} {', '.join(a.nodes)}: {a.detail}"
        detail = f"{a.at_s:.1f} s after the fault (wall clock): {what}"
        out.append(
            Step(
                f"action {k + 1}",
                start,
                min(back, nxt) if restored and back is not None else nxt,
                role,
                a.step or what,
                StepOutcome.RESTORED if restored else StepOutcome.NOT_RESTORED,
                detail + (f"; {a.why}" if a.why else ""),
            )
        )
    return out


def _people(d: DrillRecord, fault_s: float, scale: float) -> list[PersonMark]:
    out = []
    if d.time_to_acknowledge_s is not None:
        at = d.time_to_acknowledge_s
        out.append(
            PersonMark(fault_s + at * scale, PersonKind.ACK, "acknowledged", f"at {at:.1f} s")
        )
    for h in d.hints:
        how = "asked for" if h.requested else "released"
        text = f"hint {h.index}"
        out.append(PersonMark(fault_s + h.at_s * scale, PersonKind.HINT, text, f"{how}: {h.text}"))
    return sorted(out, key=lambda m: m.at_s)


def _real_s(ts: datetime, t0: datetime, scale: float) -> float:
    return round((ts - t0).total_seconds() * scale, 6)


def layout(s: ScenarioResult, time_scale: float) -> Layout:
    """`time_scale`: real-world seconds per lab second (LabInfo.time_scale)."""
    evs = sorted(s.timeline, key=lambda e: e.ts)
    t0 = min([s.started_at, *(e.ts for e in evs)])
    timed = [(_real_s(e.ts, t0, time_scale), e) for e in evs]
    span = max([_real_s(s.finished_at, t0, time_scale), *(t for t, _ in timed), 1e-3])
    names = lanes(evs)
    bars = [b for n in names for b in _bars(n, [te for te in timed if lane_of(te[1]) == n], span)]
    steps, people = _run_steps(s, timed, span), []
    if s.drill is not None:
        fault_s = _fault_s(s.drill, timed, t0, time_scale)
        steps += _drill_steps(s.drill, fault_s, time_scale, span)
        people = _people(s.drill, fault_s, time_scale)
        span = max([span, *(p.at_s for p in people), *(st.end_s for st in steps)])
    rows = [RUNNER] if RUNNER in names else []
    rows += [PEOPLE] if people else []
    rows += [st.row for st in steps] + [n for n in names if n != RUNNER]
    phases = [(t, e) for t, e in timed if e.kind is EventKind.PHASE]
    bands = [
        Band(e.event.split()[1], t, phases[i + 1][0] if i + 1 < len(phases) else span, e.event)
        for i, (t, e) in enumerate(phases)
    ]
    first: dict[EventKind, Mark] = {}
    for t, e in timed:
        if e.kind in MARKERS and e.kind not in first:
            first[e.kind] = Mark(lane_of(e), t, e.kind, e.event)
    breaks = quiet_breaks(
        [
            *(t for t, _ in timed),
            *(p.at_s for p in people),
            *(t for st in steps for t in (st.start_s, st.end_s)),
        ],
        span,
    )
    requests = _outside(_request_bins(s, t0, time_scale, span), breaks)
    if requests:  # under the users' lane (their load's start, stop, first and last failure)
        rows.insert(rows.index(USERS) + 1 if USERS in rows else len(rows), REQUESTS)
    return Layout(
        lanes=tuple(rows),
        span_s=span,
        breaks=breaks,
        bands=tuple(bands),
        bars=tuple(bars),
        marks=tuple(sorted(first.values(), key=lambda m: m.at_s)),
        ticks=tuple(Mark(lane_of(e), t, e.kind or EventKind.NOTE, e.event) for t, e in timed),
        brackets=tuple(_brackets(s, first)),
        time_scale=time_scale,
        steps=tuple(steps),
        people=tuple(people),
        requests=requests,
    )
