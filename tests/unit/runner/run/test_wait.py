"""The runner's wait on lab events when the runtime's feed lags behind what it has recorded: an
exit Docker recorded inside the window but sent seconds late (a busy daemon) still ends the wait;
a feed that is not behind ends it at the deadline, and a feed that stays behind does so after a
bounded while."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any, cast

import httpx
import pytest

from runner.journal import Journal
from runner.labs.base import EventType, ExitInfo, LabDriver, LabEvent, NodeState
from runner.run import context as context_mod
from runner.run.context import Context, first_exit
from runner.run.record import Recorder
from runner.scenario import NodeStatus
from runner.timing import TimeScale

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class LaggingLab:
    """A lab whose feed sends the node's exit `lag_s` after the wait begins, and says it is
    behind until then (`behind`: whether it says so at all)."""

    def __init__(self, lag_s: float, behind: bool) -> None:
        self.lag_s, self.behind = lag_s, behind
        self.events: list[LabEvent] = []
        self.cond = threading.Condition()
        self.behind_asked = 0

    def start(self) -> None:
        def send() -> None:
            time.sleep(self.lag_s)
            info = ExitInfo(
                incarnation=2, code=1, started_at=NOW, first_output_at=None, finished_at=NOW
            )
            with self.cond:
                self.events.append(
                    LabEvent(seq=1, ts=NOW, node="serving", type=EventType.EXITED, exit=info)
                )
                self.cond.notify_all()

        threading.Thread(target=send, daemon=True).start()

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


def test_an_exit_sent_late_by_a_feed_that_is_behind_ends_the_wait() -> None:
    lab = LaggingLab(lag_s=0.6, behind=True)
    ctx = context(lab)
    lab.start()
    w = wait_exit(ctx, 0.2)
    assert w.done and first_exit(w.events) is not None


def test_a_feed_that_is_not_behind_ends_the_wait_at_its_deadline() -> None:
    lab = LaggingLab(lag_s=5.0, behind=False)
    ctx = context(lab)
    lab.start()
    t0 = time.monotonic()
    w = wait_exit(ctx, 0.2)
    assert not w.done and time.monotonic() - t0 < 2.0
    assert lab.behind_asked == 1


def test_a_feed_that_stays_behind_ends_the_wait_after_a_bounded_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context_mod, "EVENT_LAG_S", 0.5)
    lab = LaggingLab(lag_s=60.0, behind=True)
    ctx = context(lab)
    lab.start()
    t0 = time.monotonic()
    w = wait_exit(ctx, 0.2)
    assert not w.done and 0.6 <= time.monotonic() - t0 < 3.0
