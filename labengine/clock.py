"""The wall clock the lab engine's log lines are stamped with.

Real vLLM stamps its records with the process's local time (`%m-%d %H:%M:%S`) and PyTorch's c10
logger with its own (`[W604 13:43:33.738075649 file:line]`, see pytorch_line), so what a line
looks like depends on the day. The lab engine's own variable VLLM_LAB_CLOCK_START (envs.LAB: no
vLLM reads it) starts the process's wall clock at an ISO 8601 instant (`2026-06-04T13:43:33`, a
time without a zone is local time) and lets it run on from there at the real rate, so that a
test sees every month's lines without waiting for the calendar. Unset, the clock is the real one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import datetime
from functools import cache

CLOCK_ENV = "VLLM_LAB_CLOCK_START"


class ClockError(ValueError):
    pass


def start_of(env: Mapping[str, str]) -> float | None:
    """The instant VLLM_LAB_CLOCK_START names, as a Unix time (None when unset)."""
    raw = env.get(CLOCK_ENV)
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw).timestamp()
    except (ValueError, OverflowError, OSError):
        raise ClockError(
            f"{CLOCK_ENV}={raw!r}: not an ISO 8601 date and time (the lab engine's clock "
            "start, e.g. 2026-06-04T13:43:33)"
        ) from None


@cache
def _start() -> tuple[float, float] | None:
    """(the lab clock's start, the monotonic clock then), fixed when the process first reads
    it; None for the real clock (config resolution refuses a bad value; until then the real
    clock stamps the lines)."""
    try:
        start = start_of(os.environ)
    except ClockError:
        return None
    return None if start is None else (start, time.monotonic())


def now() -> float:
    started = _start()
    if started is None:
        return time.time()
    start, mono = started
    return start + (time.monotonic() - mono)


def localtime() -> time.struct_time:
    return time.localtime(now())


def pytorch_prefix(severity: str, file: str, line: int, rank: int | None = None) -> str:
    """What PyTorch's c10 logger puts before a message (c10/util/Logging.cpp,
    MessageLogger::MessageLogger, the non-glog build the PyPI wheels are): `[rank<N>]:` once
    the process group has set the global rank (SetGlobalRank), then `[`, the severity letter,
    the date as `(tm_mon + 1) * 100 + tm_mday` with no padding (`W604` on 4 June, `W1229` on 29
    December), the time `%H:%M:%S` padded, a dot and `std::setw(9)` of CLOCK_MONOTONIC's
    tv_nsec (nine digits, not the wall clock's fraction), the file's basename and line, `] `.
    Checked against torch 2.13's libc10 run under faketime: `[rank0]:[I109 08:05:07.983353369
    socket.cpp:955] `."""
    t = localtime()
    ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC) % 1_000_000_000
    date = (t.tm_mon) * 100 + t.tm_mday  # struct_time's tm_mon is already 1-based
    ranked = f"[rank{rank}]:" if rank is not None else ""
    return (
        f"{ranked}[{severity}{date} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{ns:09d} "
        f"{file}:{line}] "
    )
