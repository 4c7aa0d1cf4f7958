"""The runner's wait on lab events when the runtime's feed lags behind what it has recorded: an
exit Docker recorded inside the window but sent seconds late (a busy daemon) still ends the wait;
a feed that is not behind ends it at the deadline, and a feed that stays behind does so after a
bounded while. And a wait timed from a node's first output when the node's start outlasts the
allowance for it (a loaded machine)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any, cast

import httpx
import pytest

from runner.labs.base import EventType, ExitInfo, LabDriver, LabEvent, NodeState
from runner.run import context as context_mod
from runner.run.context import Context, first_exit
from runner.run.journal import Journal
from runner.run.record import Recorder
from runner.spec.kinds import NodeStatus
from runner.spec.timing import TimeScale

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class LaggingLab:
    """A lab whose feed sends the node's exit `lag_s` after the wait begins, and says it is
    behind until then (`behind`: whether it says so at all)."""

    def __init__(self, lag_s: float, behind: bool) -> None:
        self.lag_s, self.behind = lag_s, behind
        self.events: list[LabEvent] = []
        self.cond = threading.Condition()
        self.behind_asked = 0
        self.reports_first_output = True

    def start(self) -> None:
        def send() -> None:
            time.sleep(self.lag_s)
            self.exit(first_output_at=None, finished_at=NOW)

        threading.Thread(target=send, daemon=True).start()

    def exit(self, first_output_at: datetime | None, finished_at: datetime) -> None:
        """Send the node's exit (incarnation 2, code 1) on the feed."""
        info = ExitInfo(
            incarnation=2,
            code=1,
            started_at=NOW,
            first_output_at=first_output_at,
            finished_at=finished_at,
        )
        with self.cond:
            self.events.append(
                LabEvent(seq=1, ts=NOW, node="serving", type=EventType.EXITED, exit=info)
            )
            self.cond.notify_all()

    def states(self) -> dict[str, NodeState]:
        st = NodeState(
            name="serving",
            status=NodeStatus.RUNNING,
            generation=1,
            incarnation=2,
            restarts=1,
            ready=False,
        )
        return {"serving": st}

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        with self.cond:
            if len(self.events) <= since and timeout > 0:
                self.cond.wait_for(lambda: len(self.events) > since, timeout)
            return self.events[since:]

    def events_behind(self, node: str) -> bool:
        self.behind_asked += 1
        with self.cond:
            return self.behind and not self.events


def context(lab: LaggingLab) -> Context:
    return Context(
        lab=cast(LabDriver, lab),
        scale=cast(TimeScale, None),
        journal=cast(Journal, None),
        scenario_id="lagging",
        target="serving",
        progress=lambda _s: None,
        rec=Recorder(),
        http=cast(httpx.Client, None),
    )


def wait_exit(ctx: Context, timeout: float) -> Any:
    return ctx.wait_for(lambda _s, evs: first_exit(evs) is not None, timeout)


def timed(lab: LaggingLab, timeout: float, window: float | None = None) -> tuple[Any, float]:
    """Start the lab's node and wait for its exit (timed from its first output, with `window`):
    what the wait saw, and how long it took."""
    ctx = context(lab)
    lab.start()
    t0 = time.monotonic()
    w = ctx.wait_for(lambda _s, evs: first_exit(evs) is not None, timeout, from_output=window)
    return w, time.monotonic() - t0


def test_an_exit_sent_late_by_a_feed_that_is_behind_ends_the_wait() -> None:
    lab = LaggingLab(lag_s=0.6, behind=True)
    ctx = context(lab)
    lab.start()
    w = wait_exit(ctx, 0.2)
    assert w.done and first_exit(w.events) is not None


def test_a_feed_that_is_not_behind_ends_the_wait_at_its_deadline() -> None:
    lab = LaggingLab(lag_s=5.0, behind=False)
    w, took = timed(lab, 0.2)
    assert not w.done and took < 2.0
    assert lab.behind_asked == 1


def test_a_feed_that_stays_behind_ends_the_wait_after_a_bounded_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context_mod, "EVENT_LAG_S", 0.5)
    w, took = timed(LaggingLab(lag_s=60.0, behind=True), 0.2)
    assert not w.done and 0.6 <= took < 3.0


class SlowStartLab(LaggingLab):
    """A node that writes its first line `output_s` after the wait begins and exits
    `exit_after_s` after that line."""

    def __init__(self, output_s: float, exit_after_s: float | None) -> None:
        super().__init__(lag_s=0.0, behind=False)
        self.output_s, self.exit_after_s = output_s, exit_after_s
        self.first_output: datetime | None = None

    def start(self) -> None:
        def run() -> None:
            time.sleep(self.output_s)
            self.first_output = datetime.now(UTC)
            if self.exit_after_s is None:
                return
            time.sleep(self.exit_after_s)
            self.exit(first_output_at=self.first_output, finished_at=datetime.now(UTC))

        threading.Thread(target=run, daemon=True).start()

    def states(self) -> dict[str, NodeState]:
        st = super().states()["serving"]
        return {"serving": st.model_copy(update={"first_output_at": self.first_output})}


def test_a_start_longer_than_its_allowance_is_waited_for() -> None:
    """The first line comes 1.2 s in, past a 0.5 s timeout; the exit 0.2 s after it is within
    the 0.4 s window from that line."""
    w, _ = timed(SlowStartLab(output_s=1.2, exit_after_s=0.2), 0.5, window=0.4)
    assert w.done and first_exit(w.events) is not None


def test_the_window_from_the_first_output_still_ends_the_wait() -> None:
    """A node that writes its first line late and then never exits: the wait ends the window
    after that line, not at the start-up cap."""
    w, took = timed(SlowStartLab(output_s=1.0, exit_after_s=None), 0.3, window=0.3)
    assert not w.done
    assert 1.25 <= took < 5.0


def test_a_node_that_never_writes_is_waited_for_a_bounded_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context_mod, "START_OVERRUN_S", 1.0)
    w, took = timed(SlowStartLab(output_s=60.0, exit_after_s=None), 0.2, window=0.2)
    assert not w.done and 1.1 <= took < 4.0


def test_a_lab_that_cannot_see_a_start_is_not_waited_for() -> None:
    """Where the lab learns a node's first output only at ready or exit (Kubernetes), a node
    without one may be hung as well as starting: the wait ends at its timeout."""
    lab = SlowStartLab(output_s=60.0, exit_after_s=None)
    lab.reports_first_output = False
    w, took = timed(lab, 0.2, window=0.2)
    assert not w.done and took < 1.0


class CatchingUpLab(LaggingLab):
    """A crash-looping node whose latest start the feed sends `lag_s` late: until then its
    state names the incarnation before."""

    def states(self) -> dict[str, NodeState]:
        st = super().states()["serving"]
        with self.cond:
            return {"serving": st.model_copy(update={"incarnation": 2 + len(self.events)})}


def test_a_state_is_read_once_the_feed_has_caught_up() -> None:
    lab = CatchingUpLab(lag_s=0.5, behind=True)
    ctx = context(lab)
    lab.start()
    assert lab.states()["serving"].incarnation == 2
    st = ctx.caught_up()
    assert st.incarnation == 3 and ctx.seq == 1


def test_a_feed_that_is_not_behind_is_not_waited_for() -> None:
    lab = CatchingUpLab(lag_s=5.0, behind=False)
    ctx = context(lab)
    lab.start()
    t0 = time.monotonic()
    assert ctx.caught_up().incarnation == 2 and time.monotonic() - t0 < 0.5
