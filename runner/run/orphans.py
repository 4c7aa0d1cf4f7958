"""A `command` step's processes that outlived their runner: the runner killed with no chance to
stop them (SIGKILL, a machine's out-of-memory killer), they run on in the session the step gave
them. Each step's environment carries a mark (MARK_ENV) that the journal holds before the step
starts, so `gameday cleanup` finds every process of it, whatever its pid or group became, and
stops it: SIGTERM, then SIGKILL to what is left after a grace.

Processes are found through /proc (Linux): a process's environment is readable there by its
owner only, which is the user who ran the step, and who runs cleanup."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection
from pathlib import Path

from runner import procstat

MARK_ENV = "GAMEDAY_STEP_MARK"
GRACE_S = 5.0  # SIGTERM to SIGKILL
POLL_S = 0.05

_PROC = Path("/proc")


def marked(marks: Collection[str]) -> dict[int, str]:
    """pid -> mark of every process whose environment carries one of `marks`."""
    wanted = {f"{MARK_ENV}={m}".encode(): m for m in marks}
    found: dict[int, str] = {}
    if not wanted or not _PROC.is_dir():
        return found
    me = os.getpid()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if not procstat.running(entry.name):
            continue  # already dead, waiting for its parent to reap it
        for var in env.split(b"\0"):
            if var in wanted:
                found[int(entry.name)] = wanted[var]
                break
    return found


def stop_marked(marks: Collection[str]) -> dict[str, list[int]]:
    """Stop every process carrying one of `marks` (SIGTERM to it and its group, SIGKILL to what
    is left GRACE_S later); mark -> the pids stopped."""
    found = marked(marks)
    out: dict[str, list[int]] = {}
    own_group = os.getpgrp()
    for pid, mark in found.items():
        out.setdefault(mark, []).append(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            pgid = os.getpgid(pid)
            if pgid != own_group:
                os.killpg(pgid, signal.SIGTERM)
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    left = set(found)
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left &= set(marked(marks))
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return {m: sorted(pids) for m, pids in out.items()}
