"""One clock for every duration a person reads: real-world seconds, with the lab's own seconds
in brackets where the lab runs scaled (a lab at time scale k runs k times faster, so k real
seconds pass in one lab second). JUnit's `time` is the exception: wall-clock, as CI expects."""

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
