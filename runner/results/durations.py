"""Two clocks, one rule for every duration a person reads.

- The system's times (time to fail, a run's times to detect and recover, a scenario's windows)
  are real-world seconds, with the lab's own seconds in brackets where the lab runs scaled (a lab
  at time scale k runs k times faster, so k real seconds pass in one lab second).
- People's times in a drill (to acknowledge, detect, recover) are wall-clock seconds: people act
  in wall time, which no time scale shortens. They are labelled `wall`.
- Every comparison is made in one unit: a person's wall seconds are converted to real-world
  (wall seconds x k: the lab's wall clock is its lab clock) before they meet a window.

JUnit's `time` is the exception: wall-clock, as CI expects."""

from __future__ import annotations


def real_s(seconds: float | None, time_scale: float) -> str:
    """`seconds` (real-world) as "12.0 s", or "12.0 s [0.120 s lab]" on a scaled lab; "-" for
    none."""
    if seconds is None:
        return "-"
    text = f"{seconds:.1f} s"
    if time_scale != 1:
        text += f" [{seconds / time_scale:.3f} s lab]"
    return text


def wall_s(seconds: float | None) -> str:
    """A person's time (wall-clock seconds) as "5.9 s wall"; "-" for none."""
    return "-" if seconds is None else f"{seconds:.1f} s wall"


def wall_to_real(seconds: float, time_scale: float) -> float:
    """A person's wall seconds as the real-world seconds the lab's scaled clock counts in them."""
    return seconds * time_scale


def within(wall: float, time_scale: float, max_s: float, min_s: float = 0.0) -> bool:
    """A person's time (wall seconds) against a window (real-world seconds), both real-world."""
    return min_s <= wall_to_real(wall, time_scale) <= max_s


def wall_against(
    wall: float | None, time_scale: float, max_s: float | None, min_s: float = 0.0
) -> str:
    """A person's time, and where it falls against a real-world window: "5.9 s wall (590.0 s
    real-world at x100: OVER the 420 s window)"; on an unscaled lab wall and real-world are one
    figure ("5.9 s wall (within the 420 s window)")."""
    if max_s is None:
        return wall_s(wall)
    window = f"{min_s:g}-{max_s:g} s" if min_s else f"{max_s:g} s"
    if wall is None:
        return f"- (window {window} real-world)"
    verdict = "within" if within(wall, time_scale, max_s, min_s) else "OVER"
    if time_scale == 1:
        return f"{wall_s(wall)} ({verdict} the {window} window)"
    real = f"{wall_to_real(wall, time_scale):.1f} s real-world at x{time_scale:g}"
    return f"{wall_s(wall)} ({real}: {verdict} the {window} window)"
