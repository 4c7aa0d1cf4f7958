"""A scenario's timeline as a Gantt chart, laid out: `layout` turns the recorded events into
lanes, phase bands, incarnation bars, markers and brackets on an axis of real-world seconds
(runner.report.gantt draws it).

One lane each for the runner, every node that has an event, Prometheus, and any other source
(ansible). The axis is broken where a long quiet gap would squeeze the rest: such a gap takes a
fixed BREAK_PX and is marked, so seconds-long bursts and a 300-second back-off share a picture.
"""

from __future__ import annotations

import enum
import itertools
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from runner.results.schema import EventKind, ScenarioResult, TimelineEvent

RUNNER = "runner"
PROMETHEUS = "prometheus"
WIDTH = 1100  # px of the whole picture
BREAK_PX = 44.0  # px a compressed quiet gap takes
MIN_QUIET_S = 10.0  # real seconds: a shorter gap is never compressed
QUIET_FACTOR = 10.0  # a gap this many times the median gap is quiet
MAX_BREAKS = 8


class BarState(enum.StrEnum):
    STARTING = "starting"  # started, not ready yet
    RUNNING = "running"  # ready
    UNREADY = "unready"
    CRASHED = "crashed"  # exited on its own, not restarted yet
    BACKOFF = "back-off"  # the runtime waits before the next start


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
    """The runner first, the nodes in natural order, Prometheus, then any other source."""
    evs = list(events)
    nodes = sorted({e.node for e in evs if e.node is not None}, key=_natural)
    others = sorted({lane_of(e) for e in evs} - {RUNNER, PROMETHEUS, *nodes})
    return (RUNNER, *nodes, PROMETHEUS, *others)


def quiet_breaks(times: Iterable[float], span_s: float) -> tuple[tuple[float, float], ...]:
    """The gaps between consecutive event times to compress: those longer than MIN_QUIET_S and
    QUIET_FACTOR times the median gap (where events bunch, a long silence is compressed; evenly
    spread events keep a linear axis), the longest MAX_BREAKS of them."""
    ts = sorted({0.0, span_s, *times})
    gaps = [(a, b) for a, b in itertools.pairwise(ts)]
    if not gaps:
        return ()
    median = statistics.median(b - a for a, b in gaps)
    quiet = [(a, b) for a, b in gaps if b - a > max(MIN_QUIET_S, QUIET_FACTOR * median)]
    quiet.sort(key=lambda g: g[0] - g[1])
    return tuple(sorted(quiet[:MAX_BREAKS]))


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
            nxt = None if e.event.startswith("stopped by the lab") else (BarState.CRASHED, t, inc)
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
    phases = [(t, e) for t, e in timed if e.kind is EventKind.PHASE]
    bands = [
        Band(e.event.split()[1], t, phases[i + 1][0] if i + 1 < len(phases) else span, e.event)
        for i, (t, e) in enumerate(phases)
    ]
    first: dict[EventKind, Mark] = {}
    for t, e in timed:
        if e.kind in MARKERS and e.kind not in first:
            first[e.kind] = Mark(lane_of(e), t, e.kind, e.event)
    return Layout(
        lanes=names,
        span_s=span,
        breaks=quiet_breaks((t for t, _ in timed), span),
        bands=tuple(bands),
        bars=tuple(bars),
        marks=tuple(sorted(first.values(), key=lambda m: m.at_s)),
        ticks=tuple(Mark(lane_of(e), t, e.kind or EventKind.NOTE, e.event) for t, e in timed),
        brackets=tuple(_brackets(s, first)),
        time_scale=time_scale,
    )
