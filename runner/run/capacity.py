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

`run --parallel auto` picks as many instances as the machine holds (`auto_parallel`): the usable
cores not already busy, one per instance; the memory available, at the lab's measured cost per
instance (`data/instance_cost.json`, written by `bench/parallel.py --measure`); and no more than
the scenarios that apply. docs/commands.md has the formula and the figures.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from runner.errors import InputError
from runner.labs.registry import entry
from runner.run.parallel import MAX_PARALLEL
from runner.spec.inventory import Inventory

# usable cores one instance of a lab on this machine needs for its timed probes to hold
CORES_PER_INSTANCE = 1
# the share of the memory available that auto's instances may take: the rest is the runner's own
# (one process however many instances), the page cache and whatever else the machine runs
MEMORY_SHARE = 0.8
# auto on a lab whose instances run on a cluster: one per scenario, at most this many at once
# (each is a namespace of pods the cluster schedules; the runner's probes of them still run here)
CLUSTER_AUTO_CAP = 8
COST_FILE = Path(__file__).parent / "data" / "instance_cost.json"
# how long auto watches the cores to see how busy they already are
BUSY_WINDOW_S = 0.5


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


@dataclass(frozen=True)
class InstanceCost:
    """What one instance of the local lab took while it ran the seed scenarios, measured by
    `bench/parallel.py --measure` (peak resident memory per part, CPU in cores)."""

    measured: str
    lab: str
    nodes: int
    peak_rss_mib: dict[str, float]
    cpu_cores: dict[str, float]

    @property
    def per_node_mib(self) -> float:
        """An engine node and its node-exporter: engines and exporters scale with the nodes."""
        return (self.peak_rss_mib["engines"] + self.peak_rss_mib["exporters"]) / self.nodes

    @property
    def fixed_mib(self) -> float:
        """The supervisor, Prometheus and Alertmanager: one each per instance."""
        rss = self.peak_rss_mib
        return rss["supervisor"] + rss["prometheus"] + rss["alertmanager"]

    def memory_mib(self, inventory: Inventory) -> float:
        return self.fixed_mib + self.per_node_mib * len(inventory.nodes)


@cache
def instance_cost(path: Path = COST_FILE) -> InstanceCost:
    data = json.loads(path.read_text(encoding="utf-8"))
    return InstanceCost(
        measured=data["measured"],
        lab=data["lab"],
        nodes=int(data["nodes"]),
        peak_rss_mib={k: float(v) for k, v in data["peak_rss_mib"].items()},
        cpu_cores={k: float(v) for k, v in data["cpu_cores"].items()},
    )


@dataclass(frozen=True)
class Machine:
    """This machine as auto sees it: usable cores, how many of them are already busy, and the
    memory available (MemAvailable)."""

    cores: int
    busy: float
    mem_available_mib: float


def busy_cores(window_s: float = BUSY_WINDOW_S) -> float:
    """How many of the usable cores other work keeps busy, from /proc/stat's counters of those
    cores over `window_s` (a CI container's CPU set, not the host's). 0 where there is no
    /proc/stat."""
    try:
        cpus = {f"cpu{c}" for c in os.sched_getaffinity(0)}
    except AttributeError:
        return 0.0

    def sample() -> tuple[int, int]:
        busy = total = 0
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name in cpus:
                # user nice system idle iowait irq softirq steal
                ticks = [int(f) for f in fields[:8]]
                total += sum(ticks)
                busy += sum(ticks) - ticks[3] - ticks[4]
        return busy, total

    try:
        b0, t0 = sample()
        time.sleep(window_s)
        b1, t1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    return len(cpus) * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


def mem_available_mib() -> float:
    """MemAvailable (what can be had without swapping); no /proc/meminfo: unlimited."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return math.inf


def this_machine() -> Machine:
    return Machine(usable_cores(), busy_cores(), mem_available_mib())


@dataclass(frozen=True)
class AutoChoice:
    """What `--parallel auto` picks, and the figures it picked it from."""

    n: int
    why: str

    def sentence(self) -> str:
        return f"--parallel auto: {self.n} instance(s): {self.why}"


def auto_parallel(
    inventory: Inventory,
    scenarios: int,
    machine: Machine | None = None,
    cost: InstanceCost | None = None,
) -> AutoChoice:
    """As many instances of the lab as this machine holds without starving them, for
    `scenarios` scenarios that apply: the free cores at CORES_PER_INSTANCE each, MEMORY_SHARE of
    the memory available at the lab's measured cost, at most one per scenario. A lab whose
    instances run on a cluster: one per scenario, at most CLUSTER_AUTO_CAP."""
    lab = inventory.lab
    apply = f"{scenarios} scenario(s) apply"
    if scenarios <= 1:
        return AutoChoice(1, apply)
    if lab.adopt is not None:
        return AutoChoice(1, f"lab {lab.name!r} adopts a deployment, which runs one instance")
    if not entry(lab.kind).instances_share_host:
        n = min(scenarios, CLUSTER_AUTO_CAP, MAX_PARALLEL)
        why = (
            f"instances of lab {lab.name!r} run on the cluster's nodes, not here: one per "
            f"scenario ({apply}), at most {CLUSTER_AUTO_CAP}"
        )
        return _isolable(inventory, n, why)
    machine = this_machine() if machine is None else machine
    cost = instance_cost() if cost is None else cost
    free = max(1, math.floor(machine.cores - machine.busy + 0.5))
    by_cores = max(1, free // CORES_PER_INSTANCE)
    per = cost.memory_mib(inventory)
    if math.isinf(machine.mem_available_mib):  # no /proc/meminfo: the memory does not limit
        by_memory, memory = MAX_PARALLEL, "memory unknown"
    else:
        by_memory = max(1, math.floor(machine.mem_available_mib * MEMORY_SHARE / per))
        memory = f"{machine.mem_available_mib / 1024:.1f} GiB available"
    n = min(by_cores, by_memory, scenarios, MAX_PARALLEL)
    why = (
        f"{machine.cores} usable core(s), {machine.busy:.1f} busy, so {by_cores} at "
        f"{CORES_PER_INSTANCE} core each; {memory}, {MEMORY_SHARE:.0%} of it holds {by_memory} "
        f"at {per:.0f} MiB each ({cost.fixed_mib:.0f} MiB + {cost.per_node_mib:.0f} MiB x "
        f"{len(inventory.nodes)} nodes, measured {cost.measured}); {apply}"
    )
    return _isolable(inventory, n, why)


def _isolable(inventory: Inventory, n: int, why: str) -> AutoChoice:
    """`n`, unless the lab cannot be made into n instances (addresses that are not loopback, a
    namespace too long): then one, saying why."""
    if n > 1:
        try:
            entry(inventory.lab.kind).check_instances(inventory, n)
        except InputError as exc:
            return AutoChoice(1, f"{why}; but the lab cannot run several instances: {exc.message}")
    return AutoChoice(n, why)
