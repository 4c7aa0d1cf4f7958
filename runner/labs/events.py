"""The lab-event feed the drivers that watch a runtime share (compose: Docker's events;
kubernetes: a pod watch): events appended by the watching threads, waited on by the runner."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from runner.labs.base import EventType, LabEvent


class EventFeed:
    """Mixin: `emit` from any thread; `wait_events` blocks until there is something new. The
    driver's `_sync` starts its watch (once) before anyone waits."""

    _cond: threading.Condition
    _events: list[LabEvent]

    def _init_feed(self) -> None:
        self._cond = threading.Condition()
        self._events = []

    def _sync(self) -> None:
        raise NotImplementedError

    def emit(self, node: str, type_: EventType, ts: datetime, **data: Any) -> None:
        with self._cond:
            self._events.append(
                LabEvent(seq=len(self._events) + 1, ts=ts, node=node, type=type_, data=data)
            )
            self._cond.notify_all()

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        self._sync()
        with self._cond:
            if len(self._events) <= since and timeout > 0:
                self._cond.wait_for(lambda: len(self._events) > since, timeout)
            return self._events[since:]

    def last_event_seq(self) -> int:
        self._sync()
        with self._cond:
            return len(self._events)
