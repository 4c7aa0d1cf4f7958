"""A drill as seen from outside: its status (a snapshot) and its events (what changed). The drill
publishes both on a DrillBus; the live page, the terminal view and a workshop's scoreboard only
read them. Times are wall seconds since the fault (`at_s`): people's clock, a real-world second
each (the time scale speeds up the lab, not the people; runner.results.durations).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from runner.results.drill_record import Frozen, HintView, ObservedAction
from runner.spec.kinds import NodeStatus


class DrillPhase(enum.StrEnum):
    BASELINE = "baseline"
    INJECT = "inject"
    EXPECT = "expect"  # waiting for the failure to show
    HANDED_OVER = "handed_over"  # the failure showed; the people have the lab
    RECOVERED = "recovered"  # the verify probes passed
    GAVE_UP = "gave_up"  # someone gave up (Ctrl-C, `gameday drill stop`, the page)
    TIMED_OUT = "timed_out"  # --timeout passed before service was back
    CLEANUP = "cleanup"
    DONE = "done"
    ERROR = "error"  # gameday could not carry the drill (lab error, no failure showed)


class NodeView(Frozen):
    name: str
    status: NodeStatus
    ready: bool
    restarts: int
    generation: int
    # its restart policy is restarting it and it has not been ready since (drawn as failing,
    # whatever its state between two crashes)
    crash_looping: bool = False


class ProbeView(Frozen):
    name: str
    verdict: str  # passed / failed / error
    observed: str


class EventKind(enum.StrEnum):
    PHASE = "phase"
    NODE = "node"  # a node's state changed
    PROBE = "probe"  # the verify probes' results changed
    ALERT = "alert"  # an alert started or stopped firing
    TIMELINE = "timeline"  # a line of the run's timeline
    ACTION = "action"  # a person's action was recognised (data: ObservedAction)
    HINT = "hint"  # a hint was released (data: HintView)
    ACK = "ack"  # someone acknowledged the incident
    DETECTED = "detected"  # the first expected alert fired
    RECOVERED = "recovered"
    USERS = "users"  # the load's figures moved (one line, redrawn in place)


class DrillEvent(Frozen):
    seq: int
    ts: datetime
    at_s: float | None  # None before the fault
    kind: EventKind
    text: str  # one line a person can read
    data: dict[str, Any] = {}


class UsersView(Frozen):
    """What the scenario's load's users feel, as of a moment: answers counted by when they
    came (a user feels a failure when it answers), over the whole load, since the fault, and
    in the last `window_s` wall seconds (the error rate now); `bins`: (sent, failed) per
    `bin_s` wall seconds over the last minute or so, oldest first, for the page's strip."""

    sent: int = 0
    failed: int = 0
    fault_sent: int = 0
    fault_failed: int = 0
    window_s: float
    now_sent: int = 0
    now_failed: int = 0
    bin_s: float
    bins: tuple[tuple[int, int], ...] = ()

    @property
    def error_rate_now(self) -> float | None:
        return None if self.now_sent == 0 else self.now_failed / self.now_sent

    def line(self) -> str:
        """The figures as the page's event line reads them."""
        rate = self.error_rate_now
        now = (
            "no answer"
            if rate is None
            else f"{rate:.0%} failing ({self.now_failed} of {self.now_sent})"
        )
        return (
            f"users: {now} in the last {self.window_s:g} s; {self.fault_failed} of "
            f"{self.fault_sent} failed since the fault, {self.failed} of {self.sent} in all"
        )


class DrillStatus(Frozen):
    """Everything a page needs to draw the drill at one moment."""

    scenario: str
    title: str
    lab: str
    seat: int | None = None  # the workshop seat (a --parallel instance), when in one
    phase: DrillPhase
    started_at: datetime
    fault_at: datetime | None = None
    clock_s: float | None = None  # wall seconds since the fault, as of this snapshot
    nodes: tuple[NodeView, ...] = ()
    probes: tuple[ProbeView, ...] = ()
    alerts: tuple[str, ...] = ()  # firing now
    timeline: tuple[str, ...] = ()  # the latest lines, oldest first
    hints: tuple[HintView, ...] = ()  # released so far
    hints_left: int = 0
    actions: tuple[ObservedAction, ...] = ()
    detected_at_s: float | None = None
    acked_at_s: float | None = None
    recovered_at_s: float | None = None
    users: UsersView | None = None  # the scenario's load, when it has one
    page_url: str | None = None

    @property
    def shortcuts(self) -> tuple[ObservedAction, ...]:
        return tuple(a for a in self.actions if a.shortcut)
