"""How loaded the machine was while a window was measured, and the rule that keeps a verdict
from depending on it.

At time scale k a lab second is k real-world seconds, so a second in which the lab's processes
wait for a CPU reads as k seconds of "time to recover". The stall clock measures that waiting:

- Linux's CPU pressure stall information (`/proc/pressure/cpu`, its `some ... total=`): the
  cumulative microseconds during which at least one runnable task waited for a CPU. A process of
  the lab delayed by d seconds was waiting for those d seconds, so d is at most the stall the
  machine reports over the same span.
- Where that file is missing (kernels before 4.20, some containers), the scheduler delay of a
  sampling thread: it sleeps SAMPLE_S at a time, and how much later than asked it wakes up is
  time it was runnable and waited, summed.

A process-wide `LoadWatch` samples the clock a few times a second, so the stall within any span
of the recent past (between two datetimes, as the phases measure their windows) is known.

The rule (`judge`): a window is failed only if the measured time is outside it with the stall
counted in gameday's favour (taken out of a time over `max_s`, added to one under `min_s`); if
only the stall explains the miss, the verdict is `inconclusive`, with the evidence.
"""

from __future__ import annotations

import bisect
import enum
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from runner.results.schema import Verdict
from runner.spec.kinds import Window
from runner.spec.timing import TimeScale

PSI_CPU = Path("/proc/pressure/cpu")
SAMPLE_S = 0.01  # the fallback's sleep: short, so that its lateness follows the contention
WATCH_EVERY_S = 0.2  # how often the watch records the cumulative stall
HISTORY = 18_000  # samples kept: an hour at WATCH_EVERY_S, longer than any scaled window

_SOME = re.compile(r"^some\b.*\btotal=(\d+)\s*$", re.MULTILINE)


class StallSource(enum.StrEnum):
    """Where the stall seconds come from; said in a verdict's evidence."""

    PSI = "/proc/pressure/cpu"
    SCHEDULER = "the scheduler delay of a sampling thread"


def parse_psi(text: str) -> float | None:
    """The `some` line's cumulative stall, in seconds; None when the text has none."""
    m = _SOME.search(text)
    return int(m.group(1)) / 1e6 if m else None


class StallClock(Protocol):
    source: StallSource

    def stalled_s(self) -> float:
        """Cumulative seconds the machine's CPUs were contended, from some fixed origin."""
        ...


class PsiClock:
    """The kernel's CPU pressure stall information."""

    source = StallSource.PSI

    def __init__(self, path: Path = PSI_CPU) -> None:
        self.path = path

    @classmethod
    def available(cls, path: Path = PSI_CPU) -> bool:
        try:
            return parse_psi(path.read_text()) is not None
        except OSError:  # absent, or present but disabled (psi=0 makes reads fail)
            return False

    def stalled_s(self) -> float:
        try:
            got = parse_psi(self.path.read_text())
        except OSError:
            got = None
        return got or 0.0


class SchedulerDelayClock:
    """The summed lateness of a thread's short sleeps: time it was runnable and not running.
    It is a lower bound: the scheduler favours a task that wakes from sleep, so it waits less
    than the busy processes around it (three spinning processes on 2 cores for 3 s: 0.18 s
    here against PSI's 1.64 s). Fewer overruns are excused on it, never more: a verdict leans
    to the time as measured."""

    source = StallSource.SCHEDULER

    def __init__(
        self,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        every_s: float = SAMPLE_S,
    ) -> None:
        self._sleep, self._clock, self.every_s = sleep, clock, every_s
        self._total = 0.0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def tick(self) -> float:
        """Sleep once; the lateness of the wake-up (added to the total)."""
        t0 = self._clock()
        self._sleep(self.every_s)
        late = max(0.0, self._clock() - t0 - self.every_s)
        with self._lock:
            self._total += late
        return late

    def start(self) -> SchedulerDelayClock:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="stall-sampler", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            self.tick()

    def stalled_s(self) -> float:
        with self._lock:
            return self._total


@dataclass(frozen=True)
class Stretch:
    """A measured span: its wall seconds and the seconds of it the CPUs were contended."""

    wall_s: float
    stalled_s: float
    source: StallSource


class LoadWatch:
    """The stall clock's readings over time, so that the stall within a past span is known."""

    def __init__(
        self, clock: StallClock, now: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.clock, self._now = clock, now
        self._samples: deque[tuple[float, float]] = deque(maxlen=HISTORY)  # (epoch s, stalled)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def source(self) -> StallSource:
        return self.clock.source

    def sample(self) -> None:
        at, stalled = self._now().timestamp(), self.clock.stalled_s()
        with self._lock:
            if self._samples and at <= self._samples[-1][0]:
                return
            self._samples.append((at, stalled))

    def start(self) -> LoadWatch:
        if self._thread is None:
            self.sample()
            self._thread = threading.Thread(target=self._loop, name="load-watch", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            time.sleep(WATCH_EVERY_S)
            self.sample()

    def _at(self, t: float) -> float:
        """The cumulative stall at epoch second t, interpolated between the samples around it
        (before the first sample: the first; after the last: the last)."""
        s = self._samples
        i = bisect.bisect_left(s, (t, float("-inf")))
        if i == 0:
            return s[0][1]
        if i == len(s):
            return s[-1][1]
        (t0, v0), (t1, v1) = s[i - 1], s[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def stretch(self, start: datetime, end: datetime | None = None) -> Stretch:
        """The stall within [start, end] (end: now). A span older than the history counts
        from its oldest sample: less stall, never more, so a verdict leans to the time as
        measured."""
        self.sample()
        end = end or self._now()
        wall = max(0.0, (end - start).total_seconds())
        with self._lock:
            stalled = self._at(end.timestamp()) - self._at(start.timestamp())
        return Stretch(wall, min(wall, max(0.0, stalled)), self.source)


_watch: LoadWatch | None = None
_watch_lock = threading.Lock()


def process_watch() -> LoadWatch:
    """This process's watch, started on first use: PSI where the kernel offers it, otherwise
    the sampling thread's scheduler delay. `--parallel` workers share it."""
    global _watch
    with _watch_lock:
        if _watch is None:
            clock: StallClock = (
                PsiClock() if PsiClock.available() else SchedulerDelayClock().start()
            )
            _watch = LoadWatch(clock).start()
        return _watch


@dataclass(frozen=True)
class Judged:
    verdict: Verdict
    evidence: str  # appended to the assertion's `observed` ("" when the load played no part)


def judge(scale: TimeScale, w: Window, real_s: float, stretch: Stretch | None) -> Judged:
    """A measured time (real-world seconds, over the span `stretch` describes) against the
    window. Outside the window as measured but inside it once the stalled time is counted in
    the measurement's favour: inconclusive."""
    slack = scale.to_real(scale.allowance_s)
    lo, hi = w.min_s - slack, w.max_s + slack
    if lo <= real_s <= hi:
        return Judged(Verdict.PASSED, "")
    stalled_real = scale.to_real(stretch.stalled_s) if stretch else 0.0
    if stretch is None or stretch.stalled_s <= 0:
        return Judged(Verdict.FAILED, "")
    contended = (
        f"{stalled_real:.1f} s real ({stretch.stalled_s:.3f} s of the {stretch.wall_s:.3f} s "
        f"measured) the machine's CPUs were contended ({stretch.source.value})"
    )
    if real_s > hi:
        fair = real_s - stalled_real
        if fair <= hi:
            return Judged(
                Verdict.INCONCLUSIVE,
                f"; for {contended}, and without it {fair:.1f} s real is within "
                f"{w.max_s:g} s: the machine was too loaded to judge",
            )
        return Judged(
            Verdict.FAILED,
            f"; over even without the {stalled_real:.1f} s real the CPUs were contended "
            f"({fair:.1f} s real, {stretch.source.value})",
        )
    fair = real_s + stalled_real
    if fair >= lo:
        return Judged(
            Verdict.INCONCLUSIVE,
            f"; for {contended}, and with it {fair:.1f} s real reaches {w.min_s:g} s: the "
            "machine was too loaded to judge",
        )
    return Judged(
        Verdict.FAILED,
        f"; under even with the {stalled_real:.1f} s real the CPUs were contended "
        f"({fair:.1f} s real, {stretch.source.value})",
    )


def judge_wait(lab_s: float, stretch: Stretch) -> Judged:
    """A wait of `lab_s` lab seconds (over the span `stretch` describes) that did not see what
    it waited for: failed once the lab had that long with the contended time taken out;
    inconclusive when it had less (the wait gave up at its limit, Context.window_over)."""
    had = stretch.wall_s - stretch.stalled_s
    if had > lab_s:
        return Judged(Verdict.FAILED, "")
    return Judged(
        Verdict.INCONCLUSIVE,
        f"; for {stretch.stalled_s:.3f} s of the {stretch.wall_s:.3f} s waited the machine's "
        f"CPUs were contended ({stretch.source.value}), and without it the lab had {had:.3f} s "
        f"of the {lab_s:.3f} s its window gives: the machine was too loaded to judge",
    )
