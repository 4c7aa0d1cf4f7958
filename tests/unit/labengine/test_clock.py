"""The lab engine's clock (VLLM_LAB_CLOCK_START) and PyTorch's c10 prefix on it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator

import pytest

from labengine import clock, pytorch


@pytest.fixture
def at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    def start(when: str) -> None:
        monkeypatch.setenv(clock.CLOCK_ENV, when)
        clock._start.cache_clear()

    yield start
    clock._start.cache_clear()


@pytest.mark.parametrize(
    ("when", "date"),
    [
        ("2026-01-09T08:05:07", "109"),
        ("2026-06-04T08:05:07", "604"),
        ("2026-12-29T08:05:07", "1229"),
    ],
)
def test_c10_prints_the_month_unpadded(at: Callable[[str], None], when: str, date: str) -> None:
    at(when)
    rx = rf"\[rank2\]:\[W{date} 08:05:0[78]\.\d{{9}} ProcessGroupNCCL\.cpp:1826\] "
    assert re.fullmatch(rx, pytorch.c10_prefix("W", "ProcessGroupNCCL.cpp", 1826, 2))
    # before the process group sets the global rank, no rank
    assert pytorch.c10_prefix("I", "socket.cpp", 955).startswith(f"[I{date} 08:05:0")


def test_the_clock_runs_on_from_its_start(at: Callable[[str], None]) -> None:
    at("2026-03-05T01:02:03")
    t = clock.localtime()
    assert (t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min) == (3, 5, 1, 2)
    start = clock.start_of({clock.CLOCK_ENV: "2026-03-05T01:02:03"})
    assert start is not None and 0 <= clock.now() - start < 5


def test_a_bad_start_is_refused_and_the_real_clock_stamps_until_then(
    at: Callable[[str], None],
) -> None:
    at("soon")
    with pytest.raises(clock.ClockError, match="not an ISO 8601 date and time"):
        clock.start_of({clock.CLOCK_ENV: "soon"})
    assert abs(clock.now() - time.time()) < 5
