"""How many isolated lab instances this machine holds before their probes starve.

Every instance of a lab that runs on this machine (the local lab's processes, the compose lab's
containers) runs its engines, its Prometheus and Alertmanager, and the runner's probes of it. The
probes are timed: a correctness probe under load, a delivery deadline, a time-to-recover window
at x100 where one starved wall second reads as 100 real-world seconds. On a 2-core machine, two
instances of the local lab ran the seed scenarios with the verdicts of a serial run; three starved
a correctness probe into a timeout in the baseline, and four gave a healthy system a failed
verdict. So one instance per usable core is what the machine holds, and a run asked for more is
told so before it starts, in its terminal and in each scenario's notes, rather than meeting the
starvation as an error halfway.

Instances of a Kubernetes lab run on the cluster's nodes, not here: no limit from this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from runner.labs.registry import entry
from runner.spec.inventory import Inventory

# usable cores one instance of a lab on this machine needs for its timed probes to hold
CORES_PER_INSTANCE = 1


@dataclass(frozen=True)
class Overload:
    """`run --parallel asked` on a machine that holds `holds` instances of the lab."""

    asked: int
    holds: int
    cores: int
    lab: str

    def sentence(self) -> str:
        return (
            f"--parallel {self.asked} on {self.cores} usable core(s): each instance of lab "
            f"{self.lab!r} runs on this machine and needs about {CORES_PER_INSTANCE} core for its "
            f"timed probes, so this machine holds {self.holds}; beyond that probes starve, and a "
            f"probe timeout or a window missed may be the machine's load, not the lab's fault"
        )

    def hint(self) -> str:
        return f"--parallel {self.holds}, or run on a machine with more cores"


def usable_cores() -> int:
    """The cores this process may run on (a CI container's CPU set, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def overload(inventory: Inventory, asked: int, cores: int | None = None) -> Overload | None:
    """What is wrong with running `asked` instances of the lab at once here, or None."""
    if asked <= 1 or not entry(inventory.lab.kind).instances_share_host:
        return None
    cores = usable_cores() if cores is None else cores
    holds = max(1, cores // CORES_PER_INSTANCE)
    if asked <= holds:
        return None
    return Overload(asked=asked, holds=holds, cores=cores, lab=inventory.lab.name)
