"""Real-world windows on a lab that runs faster: every edge of the window check, table-driven.

Scale 4 and allowance 0.5 lab seconds (2 real seconds of slack) keep every figure exact in binary
floating point, so the edges are the edges and not a rounding artefact."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from runner.spec.kinds import Window
from runner.spec.timing import TimeScale, elapsed_real

SCALE = TimeScale(scale=4.0, allowance_s=0.5)
WINDOW = Window(min_s=10.0, max_s=20.0)  # with the slack: 8 to 22 real seconds


@pytest.mark.parametrize(
    ("real_s", "passes"),
    [
        (7.75, False),  # just under the lower edge
        (8.0, True),  # exactly at the lower edge: min - slack
        (10.0, True),
        (15.0, True),
        (22.0, True),  # exactly at the upper edge: max + slack
        (22.25, False),  # just over the upper edge
        (0.0, False),
        (100.0, False),
    ],
)
def test_check_edges(real_s: float, passes: bool) -> None:
    assert SCALE.check(WINDOW, real_s) is passes


@pytest.mark.parametrize(
    ("scale", "window", "real_s", "passes"),
    [
        (TimeScale(1.0, 0.0), Window(min_s=5.0, max_s=5.0), 5.0, True),  # a point window
        (TimeScale(1.0, 0.0), Window(min_s=5.0, max_s=5.0), 5.25, False),
        (TimeScale(1.0, 0.0), Window(min_s=5.0, max_s=5.0), 4.75, False),
        (TimeScale(8.0, 0.25), Window(max_s=1.0), 3.0, True),  # slack 2: up to 3
        (TimeScale(8.0, 0.25), Window(max_s=1.0), 3.125, False),
    ],
)
def test_check_other_scales(scale: TimeScale, window: Window, real_s: float, passes: bool) -> None:
    assert scale.check(window, real_s) is passes


def test_conversions() -> None:
    assert SCALE.to_lab(20.0) == 5.0
    assert SCALE.to_real(5.0) == 20.0
    assert SCALE.window_deadline_lab(WINDOW) == 5.5  # max 20 real = 5 lab, + 0.5 allowance
    start = datetime(2026, 4, 19, 1, 0, 0, tzinfo=UTC)
    assert elapsed_real(SCALE, start, start + timedelta(seconds=2.5)) == 10.0
    assert elapsed_real(SCALE, start + timedelta(seconds=1), start) == -4.0


def test_describe() -> None:
    assert SCALE.describe(WINDOW) == "10-20 s real (lab x4: 2.500-5.000 s, ± 0.5 s allowance)"


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCALE.scale = 2.0  # type: ignore[misc]
