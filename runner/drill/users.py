"""The scenario's load during a drill, as the page shows it while people work: a thread that
looks at the requests answered once a second and hands the figures on when they moved.

A user feels a request when it answers, so a drill's live figures go by each answer's end
time (the after-action report's per-phase figures go by intended send time, as a run's do:
runner.run.impact)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from runner.drill.model import UsersView
from runner.run.traffic import Sent, Traffic

WINDOW_S = 10.0  # wall seconds of answers the error rate "now" is taken over
BIN_S = 2.0  # wall seconds per bar of the page's strip
BINS = 30  # bars in the strip: the last minute
EVERY_S = 1.0  # wall seconds between looks


def users_view(sent: Sequence[Sent], now: float, fault: float | None) -> UsersView:
    """The figures of the requests answered by `now` (epoch seconds); `fault`: when the
    fault was in place (None: not yet)."""
    done = [s for s in sent if s.end <= now]
    since = [s for s in done if fault is not None and s.end >= fault]
    recent = [s for s in done if s.end > now - WINDOW_S]
    bins = [[0, 0] for _ in range(BINS)]
    for s in done:
        back = int((now - s.end) // BIN_S)
        if back < BINS:
            b = bins[BINS - 1 - back]
            b[0] += 1
            b[1] += s.failed
    return UsersView(
        sent=len(done),
        failed=sum(s.failed for s in done),
        fault_sent=len(since),
        fault_failed=sum(s.failed for s in since),
        window_s=WINDOW_S,
        now_sent=len(recent),
        now_failed=sum(s.failed for s in recent),
        bin_s=BIN_S,
        bins=tuple((a, f) for a, f in bins),
    )


class LiveUsers:
    """Hands `show` the load's figures once a second while they move, until `stop`."""

    def __init__(
        self,
        traffic: Traffic,
        fault_at: Callable[[], float | None],
        show: Callable[[UsersView], None],
    ) -> None:
        self.traffic, self._fault_at, self._show = traffic, fault_at, show
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-users", daemon=True)
        self._last: UsersView | None = None

    def start(self) -> LiveUsers:
        self._thread.start()
        return self

    def look(self) -> None:
        view = users_view(self.traffic.sent(), time.time(), self._fault_at())
        if view != self._last:
            self._last = view
            self._show(view)

    def _run(self) -> None:
        while not self._stop.wait(EVERY_S):
            self.look()

    def stop(self) -> None:
        """Stop looking, after a last look (the figures as the load stopped)."""
        self._stop.set()
        self._thread.join(EVERY_S * 5)
        self.look()
