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


def test_the_drill_folder_and_its_status_are_owner_only_in_any_state_dir(
    tmp_path: Path,
) -> None:
    """A compose or Kubernetes lab's state directory is not owner-only (0755): the drill's folder
    in it is, and its status.json is 0600 from its creation, whatever the umask; a folder a
    `gameday lab` verb made first is tightened."""
    import os
    import stat

    from runner.drill import verb_log

    state = tmp_path / "compose-lab"
    state.mkdir(mode=0o755)
    old = os.umask(0o022)
    try:
        verb_log._append(state / "drill" / "lab-verbs.jsonl", {"verb": "restart"})
        assert stat.S_IMODE((state / "drill" / "lab-verbs.jsonl").stat().st_mode) == 0o600
        os.chmod(state / "drill", 0o755)  # as a gameday that made it with mkdir left it
        bus = DrillBus(status(), state / "drill")
        bus.update(status(DrillPhase.HANDED_OVER, 1.0))
    finally:
        os.umask(old)
    assert stat.S_IMODE((state / "drill").stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "drill" / "status.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in (state / "drill").iterdir()) == ["lab-verbs.jsonl", "status.json"]
    st = read_status(state / "drill")
    assert st is not None and st.phase is DrillPhase.HANDED_OVER
