"""Where a drill publishes its status and events, for any number of readers.

In process: `subscribe()` gives a reader the current snapshot then every event after it, each
reader with its own queue, so a slow page never slows the drill. On disk: every status is also
written to `status.json` (replaced atomically) in the drill's folder, for other processes (`gameday
drill ack`, a workshop's scoreboard). Requests from people (ack, a hint, giving up) come back
through `request()` to the handler the drill registered.
"""

from __future__ import annotations

import enum
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.drill.model import DrillEvent, DrillStatus, EventKind
from runner.fsutil import private_dir

STATUS_FILE = "status.json"
MAX_QUEUE = 10_000  # events a reader may fall behind by before it is dropped


class Request(enum.StrEnum):
    ACK = "ack"
    HINT = "hint"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class Snapshot:
    status: DrillStatus
    events: list[DrillEvent]  # every event so far, oldest first


class Subscription:
    """A reader's view: `snapshot` when it subscribed, then `next(timeout)` for each event (None
    on timeout); closed readers and readers that fell MAX_QUEUE behind get StopIteration."""

    def __init__(self, bus: DrillBus, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._bus = bus
        self._q: queue.Queue[DrillEvent | None] = queue.Queue(MAX_QUEUE)

    def next(self, timeout: float) -> DrillEvent | None:
        try:
            item = self._q.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            raise StopIteration
        return item

    def __iter__(self) -> Iterator[DrillEvent]:
        while True:
            item = self._q.get()
            if item is None:
                return
            yield item

    def _put(self, item: DrillEvent | None) -> bool:
        try:
            self._q.put_nowait(item)
            return True
        except queue.Full:
            return False

    def close(self) -> None:
        self._bus._drop(self)
        self._put(None)


class DrillBus:
    def __init__(self, status: DrillStatus, folder: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._status = status
        self._events: list[DrillEvent] = []
        self._subs: list[Subscription] = []
        self._folder = folder
        self._handler: Callable[[Request, dict[str, Any]], str] | None = None
        self._closed = False
        if folder is not None:
            # owner-only whatever the lab's state directory is (a compose or Kubernetes lab's
            # is not): the folder holds the page's tokens (server.json) and what people did
            private_dir(folder)
            self._write(status)

    @property
    def status(self) -> DrillStatus:
        with self._lock:
            return self._status

    def events(self) -> list[DrillEvent]:
        with self._lock:
            return list(self._events)

    def publish(
        self,
        kind: EventKind,
        text: str,
        data: dict[str, Any] | None = None,
        *,
        status: DrillStatus | None = None,
    ) -> DrillEvent:
        """Record an event (and, with it, the new status), and hand it to every reader."""
        with self._lock:
            if status is not None:
                self._status = status
            event = DrillEvent(
                seq=len(self._events) + 1,
                ts=datetime.now(UTC),
                at_s=self._status.clock_s,
                kind=kind,
                text=text,
                data=data or {},
            )
            self._events.append(event)
            subs = list(self._subs)
            current = self._status
        for s in subs:
            if not s._put(event):
                self._drop(s)
        if status is not None:
            self._write(current)
        return event

    def update(self, status: DrillStatus) -> None:
        """A new status without an event of its own (the clock moved)."""
        with self._lock:
            self._status = status
        self._write(status)

    def subscribe(self) -> Subscription:
        with self._lock:
            sub = Subscription(self, Snapshot(self._status, list(self._events)))
            if self._closed:
                sub._put(None)
            else:
                self._subs.append(sub)
            return sub

    def _drop(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def close(self) -> None:
        """The drill is over: every reader's iteration ends after the last event."""
        with self._lock:
            self._closed = True
            subs, self._subs = self._subs, []
        for s in subs:
            s._put(None)

    def on_request(self, handler: Callable[[Request, dict[str, Any]], str]) -> None:
        self._handler = handler

    def request(self, req: Request, data: dict[str, Any] | None = None) -> str:
        """A person's request (from the page, a key, `gameday drill ack`); the drill's answer,
        one line. ValueError when the drill takes no requests (yet)."""
        if self._handler is None:
            raise ValueError("this drill takes no requests yet")
        return self._handler(req, data or {})

    def _write(self, status: DrillStatus) -> None:
        if self._folder is None:
            return
        tmp = self._folder / f".{STATUS_FILE}.{os.getpid()}.{threading.get_ident()}"
        # 0600 from its creation (no fsync: it is replaced at least once a second, and a
        # reader after a crash needs a whole file, which the rename gives)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)  # a leftover of a killed writer keeps no other mode
            f.write(status.model_dump_json())
        os.replace(tmp, self._folder / STATUS_FILE)


def read_status(folder: Path) -> DrillStatus | None:
    """A drill's last status from its folder (another process's drill); None if it has none."""
    try:
        text = (folder / STATUS_FILE).read_text()
    except FileNotFoundError:
        return None
    return DrillStatus.model_validate_json(text)
