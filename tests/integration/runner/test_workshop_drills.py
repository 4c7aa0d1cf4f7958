"""A workshop's drills are detached processes: a seat already drilling is refused before any
drill starts, and `workshop down` stops a drill with SIGINT (its cleanup runs) or kills its
session after the grace period."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner.errors import InputError
from runner.spec.inventory_load import load_inventory
from runner.workshop.drills import (
    DrillRecord,
    drill_argv,
    drilling,
    read_record,
    record_path,
    start_drills,
    stop_drill,
)
from runner.workshop.seats import Workshop, create_workshop

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workshop:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    return create_workshop(load_inventory(ROOT / "inventories" / "local.yaml"), 2, 8700)


def spawn(ws: Workshop, k: int, code: str) -> tuple[subprocess.Popen[bytes], DrillRecord]:
    """A stand-in drill on seat k: a process of its own session, recorded as the seat's drill."""
    argv = [sys.executable, "-c", code]
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    rec = DrillRecord(
        seat=k, pid=proc.pid, scenario="head-only-restart", argv=tuple(argv),
        started_at=datetime.now(UTC),
    )  # fmt: skip
    record_path(ws, k).write_text(rec.model_dump_json())
    return proc, rec


SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


def test_a_seat_already_drilling_is_refused_and_no_drill_starts(ws: Workshop) -> None:
    proc, rec = spawn(ws, 1, SLEEPER)
    try:
        assert drilling(ws, 1) == rec
        with pytest.raises(InputError) as exc:
            start_drills(ws, [1, 2], "head-only-restart")
        assert exc.value.message == (
            f"[--seats]: seat 1 is already drilling head-only-restart (pid {proc.pid}): "
            "no drill started"
        )
        assert exc.value.exit_code == 2
        assert read_record(ws, 2) is None
    finally:
        proc.kill()
        proc.wait()
    assert drilling(ws, 1) is None  # a pid that is gone is no drill


def test_sigint_lets_a_drill_end_itself(ws: Workshop) -> None:
    proc, rec = spawn(ws, 1, SLEEPER)
    assert stop_drill(rec, grace_s=10) is False
    assert proc.wait(5) == -signal.SIGINT  # KeyboardInterrupt, ended by the signal itself


def test_a_drill_that_ignores_sigint_is_killed_after_the_grace(ws: Workshop) -> None:
    proc, rec = spawn(ws, 2, STUBBORN)
    t0 = time.monotonic()
    assert stop_drill(rec, grace_s=0.5) is True
    assert 0.5 <= time.monotonic() - t0 < 5
    assert proc.wait(5) == -9


def test_a_drill_is_started_detached_with_this_interpreter(ws: Workshop) -> None:
    started = start_drills(ws, [2], "head-only-restart")
    rec = started[2]
    try:
        assert rec.argv == tuple(drill_argv(ws, 2, "head-only-restart"))
        assert list(rec.argv) == [
            sys.executable, "-m", "runner.cli", "drill", "head-only-restart",
            "--lab", str(ws.folder / "seat-2.yaml"), "--seat", "2", "--page-port", "8702",
            "--listen", "127.0.0.1", "--token-file", str(ws.token_path(2)),
        ]  # fmt: skip
        # the token itself is never on the command line, which every user of the machine can read
        assert ws.token(2) not in " ".join(rec.argv)
        assert read_record(ws, 2) == rec
        assert (ws.folder / "seat-2.drill.out").exists()
        assert (ws.folder / "seat-2.drill.err").exists()
    finally:  # a failed check leaves no drill (and its lab) running
        stop_drill(rec, grace_s=10)
