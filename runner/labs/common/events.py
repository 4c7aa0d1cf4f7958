"""What the drivers that watch a runtime share (compose: Docker's events; kubernetes: a pod
watch): the lab-event feed, appended by the watching threads and waited on by the runner, and
the incarnation record each driver keeps per container start."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runner.labs.base import EventType, ExitInfo, LabEvent


@dataclass
class Incarnation:
    """One start of a node's engine, as the runtime reported it."""

    number: int
    container_id: str
    started_at: datetime
    first_output_at: datetime | None = None
    finished_at: datetime | None = None
    code: int | None = None
    stopped: bool = False  # the lab stopped it (re-apply, restart): not a failure

    def exit_info(self) -> ExitInfo | None:
        if self.finished_at is None or self.code is None:
            return None
        return ExitInfo(
            incarnation=self.number,
            code=self.code,
            started_at=self.started_at,
            first_output_at=self.first_output_at,
            finished_at=self.finished_at,
        )

    def exited(self) -> dict[str, Any]:
        """The payload of its EXITED event."""
        info = self.exit_info()
        assert info is not None
        return {"exit": info, "stopped": self.stopped}


class EventFeed:
    """A driver's lab events: `emit` from any thread (the watching ones); `wait_events` blocks
    until there is something new. `sync` (the driver's) starts its watch, once, before anyone
    reads. `cond` also guards what the driver's watch updates beside the events."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self._sync = sync
        self.cond = threading.Condition()
        self._events: list[LabEvent] = []

    @property
    def events(self) -> list[LabEvent]:
        """Every event so far, oldest first."""
        with self.cond:
            return list(self._events)

    def emit(self, node: str, type_: EventType, ts: datetime, **payload: Any) -> None:
        """`payload`: LabEvent's fields for this type (a wrong one fails here, not in a reader)."""
        with self.cond:
            self._events.append(
                LabEvent(seq=len(self._events) + 1, ts=ts, node=node, type=type_, **payload)
            )
            self.cond.notify_all()

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        self._sync()
        with self.cond:
            if len(self._events) <= since and timeout > 0:
                self.cond.wait_for(lambda: len(self._events) > since, timeout)
            return self._events[since:]

    def last_event_seq(self) -> int:
        self._sync()
        with self.cond:
            return len(self._events)
