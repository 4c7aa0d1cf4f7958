"""What one instance of a lab kind takes on this machine, as measured: the figures
`run --parallel auto` fits to the machine's free cores and memory (runner/run/capacity.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from runner.spec.inventory import Inventory


@dataclass(frozen=True)
class InstanceCost:
    """What one instance of a lab takes on this machine while it runs the scenarios of
    scenarios/ serially, as `by` (bench/instance_cost.py) measured it on `measured`: CPU in cores
    (the lab's processes and the runner's own process), memory in MiB at the parts' peaks."""

    measured: str
    by: str
    cpu_mean: float
    cpu_peak: float
    fixed_mib: float  # the supervisor (local), Prometheus and Alertmanager: one each per instance
    per_node_mib: float  # an engine node and its node-exporter: these scale with the nodes

    @property
    def headroom(self) -> float:
        """The cores one instance needs above its mean in its busiest second."""
        return max(0.0, self.cpu_peak - self.cpu_mean)

    def memory_mib(self, inventory: Inventory) -> float:
        return self.fixed_mib + self.per_node_mib * len(inventory.nodes)

    def fits(self, n: int, cores: float) -> bool:
        """Whether n instances fit `cores` free cores: all at their mean, one at its peak."""
        return n * self.cpu_mean + self.headroom <= cores + 1e-9

    def by_cores(self, cores: float) -> int:
        """The most instances that fit `cores` free cores; never fewer than one."""
        return max(1, math.floor((cores - self.headroom) / self.cpu_mean + 1e-9))

    def rule(self) -> str:
        return f"n x {self.cpu_mean:.2f} + {self.headroom:.2f}"

    def figures(self) -> str:
        return (
            f"{self.cpu_mean:.2f} core on average and {self.cpu_peak:.2f} in its busiest second "
            f"(measured {self.measured} by {self.by})"
        )
