"""The drill's bus: a snapshot then every event for each reader, the status on disk for other
processes, and people's requests back to the drill."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner.drill.bus import DrillBus, Request, read_status
from runner.drill.model import DrillPhase, DrillStatus, EventKind

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def status(phase: DrillPhase = DrillPhase.BASELINE, clock: float | None = None) -> DrillStatus:
    return DrillStatus(
        scenario="tp-mismatch", title="t", lab="local", phase=phase, started_at=T0, clock_s=clock
    )


def test_a_reader_gets_the_snapshot_then_each_event(tmp_path: Path) -> None:
    bus = DrillBus(status(), tmp_path)
    bus.publish(EventKind.PHASE, "inject", status=status(DrillPhase.INJECT))
    sub = bus.subscribe()
    assert sub.snapshot.status.phase is DrillPhase.INJECT
    assert [e.text for e in sub.snapshot.events] == ["inject"]
    bus.publish(EventKind.PHASE, "handed over", status=status(DrillPhase.HANDED_OVER, 1.5))
    event = sub.next(timeout=1)
    assert event is not None
    assert (event.seq, event.kind, event.text, event.at_s) == (
        2,
        EventKind.PHASE,
        "handed over",
        1.5,
    )
    assert sub.next(timeout=0.01) is None
    assert read_status(tmp_path) == status(DrillPhase.HANDED_OVER, 1.5)


def test_closing_ends_every_reader(tmp_path: Path) -> None:
    bus = DrillBus(status())
    sub = bus.subscribe()
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(e.text for e in sub))
    reader.start()
    bus.publish(EventKind.TIMELINE, "one")
    bus.close()
    reader.join(timeout=5)
    assert got == ["one"] and not reader.is_alive()
    late = bus.subscribe()
    assert list(late) == [] and [e.text for e in late.snapshot.events] == ["one"]


def test_requests_reach_the_drill() -> None:
    bus = DrillBus(status())
    with pytest.raises(ValueError, match="takes no requests yet"):
        bus.request(Request.ACK)
    bus.on_request(lambda req, data: f"{req.value} {data}")
    assert bus.request(Request.HINT, {"by": "page"}) == "hint {'by': 'page'}"


def test_no_status_file_is_none(tmp_path: Path) -> None:
    assert read_status(tmp_path) is None
