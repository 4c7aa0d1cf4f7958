"""Two clocks, one rule for every duration a person reads.

- The system's times (time to fail, a run's times, and a drill's time to detect: the first
  expected alert firing, which Prometheus's `for:` counts on the lab's scaled clock) are
  real-world seconds, with the lab's own seconds in brackets where the lab runs scaled (a lab at
  time scale k runs k times faster, so k real seconds pass in one lab second).
- People's times (to acknowledge, a drill's time to recover, each action's and hint's `at_s`)
  are wall-clock seconds, labelled `wall`.
- A person's wall second is a real-world second: the time scale speeds up the lab, not the
  people. So people's times meet a scenario's windows as they are, and every comparison is made
  in real-world seconds.

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


def _window(max_s: float, min_s: float) -> str:
    return f"{min_s:g}-{max_s:g} s" if min_s else f"{max_s:g} s"


def _verdict(seconds: float, max_s: float, min_s: float) -> str:
    return "within" if min_s <= seconds <= max_s else "OVER"


def person_against(wall: float | None, max_s: float | None, min_s: float = 0.0) -> str:
    """A person's time (wall seconds, which are real-world ones) against a real-world window,
    as it is: "146.0 s wall (within the 1800 s window)"."""
    if max_s is None:
        return wall_s(wall)
    if wall is None:
        return f"- (window {_window(max_s, min_s)})"
    return f"{wall_s(wall)} ({_verdict(wall, max_s, min_s)} the {_window(max_s, min_s)} window)"


def system_against(
    real: float | None, time_scale: float, max_s: float | None, min_s: float = 0.0
) -> str:
    """The system's time (real-world seconds) against a real-world window: "590.0 s [5.900 s
    lab] (OVER the 420 s window)"."""
    if max_s is None:
        return real_s(real, time_scale)
    if real is None:
        return f"- (window {_window(max_s, min_s)})"
    window = _window(max_s, min_s)
    return f"{real_s(real, time_scale)} ({_verdict(real, max_s, min_s)} the {window} window)"
