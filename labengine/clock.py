"""The wall clock the lab engine's log lines are stamped with.

Real vLLM stamps its records with the process's local time (`%m-%d %H:%M:%S`) and PyTorch's c10
logger with its own (`[W604 13:43:33.738075649 file:line]`, labengine.pytorch), so what a line
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
