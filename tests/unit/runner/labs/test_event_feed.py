"""The event feed the compose and kubernetes drivers hold (runner.labs.common.events.EventFeed)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from runner.labs.base import EventType
from runner.labs.common.events import EventFeed

T0 = datetime(2026, 4, 19, 1, 59, 54, tzinfo=UTC)


def test_events_are_numbered_in_order_and_read_from_a_seq() -> None:
    synced: list[int] = []
    feed = EventFeed(sync=lambda: synced.append(1))
    feed.emit("serving", EventType.STARTED, T0, incarnation=1, pid=7)
    feed.emit("serving", EventType.BACKOFF, T0, delay_s=0.1, restarts=1)
    assert feed.last_event_seq() == 2
    got = feed.wait_events(1, 0)
    assert [(e.seq, e.node, e.type, e.delay_s, e.restarts) for e in got] == [
        (2, "serving", EventType.BACKOFF, 0.1, 1)
    ]
    assert [e.seq for e in feed.events] == [1, 2]
    assert len(synced) == 2  # the driver's sync before every read


def test_a_waiter_wakes_on_the_next_emit() -> None:
    feed = EventFeed(sync=lambda: None)
    threading.Timer(0.05, feed.emit, args=("node1", EventType.READY, T0)).start()
    began = time.monotonic()
    got = feed.wait_events(0, 5)
    assert [(e.seq, e.type) for e in got] == [(1, EventType.READY)]
    assert time.monotonic() - began < 2


def test_a_wait_with_nothing_new_ends_at_its_timeout() -> None:
    feed = EventFeed(sync=lambda: None)
    feed.emit("node1", EventType.READY, T0)
    began = time.monotonic()
    assert feed.wait_events(1, 0.1) == []
    assert 0.09 <= time.monotonic() - began < 2
    assert feed.wait_events(1, 0) == []
