"""The drills a workshop runs on its seats: each a detached `gameday drill` (its own session, so
a facilitator's Ctrl-C or closed terminal does not reach it), started with this interpreter
(`python -m runner.cli`, never a `gameday` found on PATH), its pid kept in the workshop
folder."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import pydantic

from runner import procstat
from runner.errors import InputError
from runner.fsutil import write_private
from runner.workshop.seats import Workshop

GRACE_S = 60.0  # wall seconds a drill has to clean up after SIGINT before it is killed


class DrillRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    seat: int
    pid: int
    scenario: str
    argv: tuple[str, ...]
    started_at: datetime


def record_path(ws: Workshop, k: int) -> Path:
    return ws.folder / f"seat-{k}.drill.json"


def read_record(ws: Workshop, k: int) -> DrillRecord | None:
    try:
        return DrillRecord.model_validate_json(record_path(ws, k).read_text())
    except FileNotFoundError:
        return None


def running(rec: DrillRecord) -> bool:
    """Whether the record's process still runs and is that drill (not a reused pid)."""
    try:
        raw = Path(f"/proc/{rec.pid}/cmdline").read_bytes()
    except OSError:
        return False
    return procstat.running(rec.pid) and raw.rstrip(b"\0").split(b"\0") == [
        os.fsencode(a) for a in rec.argv
    ]


def drilling(ws: Workshop, k: int) -> DrillRecord | None:
    rec = read_record(ws, k)
    return rec if rec is not None and running(rec) else None


def drill_argv(ws: Workshop, k: int, scenario: str) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "runner.cli",
        "drill",
        scenario,
        "--lab",
        str(ws.seat_path(k)),
        "--seat",
        str(k),
        "--page-port",
        str(ws.manifest.page_base + k),
        "--listen",
        ws.manifest.listen,
        # the seat's own token, from its 0600 file: never on a command line, which every user
        # of the machine can read
        "--token-file",
        str(ws.token_path(k)),
    ]
    if ws.manifest.public_name is not None:
        argv += ["--public-name", ws.manifest.public_name]
    if ws.manifest.reports is not None:  # the workshop's own folder: out of the team's history
        argv += ["--reports", ws.manifest.reports]
    return argv


def start_drills(ws: Workshop, seats: list[int], scenario: str) -> dict[int, DrillRecord]:
    """A drill of `scenario` on each seat. Seats already drilling are refused (InputError, exit
    2) before any drill starts."""
    busy = {k: rec for k in seats if (rec := drilling(ws, k)) is not None}
    if busy:
        raise InputError(
            "; ".join(
                f"seat {k} is already drilling {r.scenario} (pid {r.pid})" for k, r in busy.items()
            )
            + ": no drill started",
            field="--seats",
            hint="choose other seats (--seats 1,3), or `gameday workshop down` to end them all",
        )
    started: dict[int, DrillRecord] = {}
    for k in seats:
        argv = drill_argv(ws, k, scenario)
        with (
            _private_append(ws.folder / f"seat-{k}.drill.out") as out,
            _private_append(ws.folder / f"seat-{k}.drill.err") as err,
        ):
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        rec = DrillRecord(
            seat=k, pid=proc.pid, scenario=scenario, argv=tuple(argv), started_at=datetime.now(UTC)
        )
        write_private(record_path(ws, k), rec.model_dump_json())
        started[k] = rec
    return started


def stop_drill(rec: DrillRecord, grace_s: float = GRACE_S) -> bool:
    """SIGINT, so the drill cleans its lab up as after Ctrl-C; SIGKILL to its whole session
    after `grace_s`. True when it had to be killed (its cleanup did not finish)."""
    if not running(rec):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(rec.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while running(rec):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(rec.pid, signal.SIGKILL)  # its own session: pgid == pid
            while running(rec):
                time.sleep(0.05)
            return True
        time.sleep(0.1)
    return False


def _private_append(path: Path) -> BinaryIO:
    """`path` opened to append, owner-only whatever the umask: a drill's output names its pages'
    addresses, tokens included."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")
