"""Converting real-world windows to a lab that runs faster.

A scenario states windows in real-world seconds. A lab with time scale k runs its phases k times
faster. Two costs in the lab do not scale: starting a process (interpreter and imports, measured
per incarnation as spawn -> first log line, and excluded) and scheduling jitter (the lab's
`timing_allowance_s`, in lab seconds, added to both edges of every converted window).

    measured_real = (event_ts - first_output_ts) * k
    passes when   min_s - allowance*k <= measured_real <= max_s + allowance*k
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from runner.spec.kinds import Window

if TYPE_CHECKING:
    from runner.spec.inventory import LabSpec


@dataclass(frozen=True)
class TimeScale:
    scale: float
    allowance_s: float

    @classmethod
    def of(cls, lab: LabSpec) -> TimeScale:
        """The lab's time scale and timing allowance."""
        return cls(lab.time_scale, lab.timing_allowance_s)

    def boot_timeout_lab(self, lab: LabSpec) -> float:
        """Lab seconds a node of `lab` may take to become ready (its `boot_timeout_s` is
        real-world)."""
        return self.to_lab(lab.boot_timeout_s)

    def to_lab(self, real_s: float) -> float:
        return real_s / self.scale

    def to_real(self, lab_s: float) -> float:
        return lab_s * self.scale

    def window_deadline_lab(self, w: Window) -> float:
        """Lab seconds to wait for something due within the window."""
        return self.to_lab(w.max_s) + self.allowance_s

    def check(self, w: Window, real_s: float) -> bool:
        slack = self.to_real(self.allowance_s)
        return w.min_s - slack <= real_s <= w.max_s + slack

    def describe(self, w: Window) -> str:
        return (
            f"{w.min_s:g}-{w.max_s:g} s real (lab x{self.scale:g}: "
            f"{self.to_lab(w.min_s):.3f}-{self.to_lab(w.max_s):.3f} s, "
            f"± {self.allowance_s:g} s allowance)"
        )


def elapsed_real(scale: TimeScale, start: datetime, end: datetime) -> float:
    return scale.to_real((end - start).total_seconds())
