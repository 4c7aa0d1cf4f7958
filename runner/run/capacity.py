"""How many isolated lab instances this machine holds before their probes starve.

Every instance of a lab that runs on this machine (the local lab's processes, the compose lab's
containers) runs its engines, its Prometheus and Alertmanager, and the runner's probes of it. The
probes are timed: a correctness probe under load, a delivery deadline, a time-to-recover window
at x100 where one starved wall second reads as 100 real-world seconds. So the instances must fit
the cores with room for their busiest moments, and a run asked for more is told so before it
starts, in its terminal and in each scenario's notes, rather than meeting the starvation as an
error halfway.

What one instance takes is measured, per lab kind, by `bench/instance_cost.py` (one instance
running the seven seed scenarios serially, read from /proc or the containers' cgroups), and kept
here as constants (`COSTS`) with the date and the command of their measurement: its CPU on
average and in its busiest second, the runner's share included, and its memory at its parts'
peaks. n instances fit when

    n x mean + (peak - mean) <= free cores,   n x memory <= MEMORY_SHARE x MemAvailable

(every instance at its mean, and room for one of them at its peak: the instances' busy moments are
scenario steps that do not line up). Free cores are the usable ones less what other work keeps
busy now, read from /proc/stat (`busy_cores`).

Instances of a Kubernetes lab run on the cluster's nodes, not here: no limit from this machine.

`run --parallel auto` picks as many instances as fit (`auto_parallel`), and no more than the
scenarios that apply. docs/commands.md has the rule and the figures.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from runner.errors import InputError
from runner.labs.registry import entry
from runner.run.parallel import MAX_PARALLEL
from runner.spec.inventory import Inventory
from runner.spec.kinds import LabKind

# the share of the memory available that auto's instances may take: the rest is the runner's own
# (one process however many instances), the page cache and whatever else the machine runs
MEMORY_SHARE = 0.8
# auto on a lab whose instances run on a cluster: one per scenario, at most this many at once
# (each is a namespace of pods the cluster schedules; the runner's probes of them still run here)
CLUSTER_AUTO_CAP = 8
# how long auto watches the cores to see how busy they already are
BUSY_WINDOW_S = 0.5


@dataclass(frozen=True)
class InstanceCost:
    """What one instance of a lab takes on this machine while it runs the seven seed scenarios
    serially, as `by` measured it on `measured`: CPU in cores (the lab's processes or containers
    and the runner's own process), memory in MiB at the parts' peaks."""

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
        n = math.floor((cores - self.headroom) / self.cpu_mean + 1e-9)
        return max(1, min(n, MAX_PARALLEL))

    def rule(self) -> str:
        return f"n x {self.cpu_mean:.2f} + {self.headroom:.2f}"

    def figures(self) -> str:
        return (
            f"{self.cpu_mean:.2f} core on average and {self.cpu_peak:.2f} in its busiest second "
            f"(measured {self.measured} by {self.by})"
        )


# One instance of each lab kind whose instances share this machine, measured by
# `bench/instance_cost.py --lab inventories/<kind>.yaml` (it prints these lines); the seven seed
# scenarios serially at x100 on 2 cores. bench/RESULTS.md has each measurement's full figures.
COSTS: dict[LabKind, InstanceCost] = {
    LabKind.LOCAL: InstanceCost(
        measured="2026-12-04 on 2 cores",
        by="bench/instance_cost.py --lab inventories/local.yaml",
        cpu_mean=0.31,
        cpu_peak=0.79,
        fixed_mib=255.8,
        per_node_mib=53.6,
    ),
    LabKind.COMPOSE: InstanceCost(
        measured="2026-12-04 on 2 cores",
        by="bench/instance_cost.py --lab inventories/local.yaml (the same programs, in containers)",
        cpu_mean=0.31,
        cpu_peak=0.79,
        fixed_mib=255.8,
        per_node_mib=53.6,
    ),
}


def instance_cost(kind: LabKind) -> InstanceCost:
    """One instance's measured cost on a lab kind whose instances share this machine."""
    return COSTS[kind]


@dataclass(frozen=True)
class Overload:
    """`run --parallel asked` on a machine whose idle cores hold `holds` instances of the lab."""

    asked: int
    holds: int
    cores: int
    lab: str
    cost: InstanceCost

    def sentence(self) -> str:
        return (
            f"--parallel {self.asked} on {self.cores} usable core(s): one instance of lab "
            f"{self.lab!r} runs on this machine and takes {self.cost.figures()}, so "
            f"{self.cost.rule()} <= {self.cores} holds {self.holds}; beyond that probes starve, "
            f"and a probe timeout or a window missed may be the machine's load, not the lab's "
            f"fault"
        )

    def hint(self) -> str:
        return f"--parallel {self.holds}, or run on a machine with more cores"


def usable_cores() -> int:
    """The cores this process may run on (a CI container's CPU set, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def overload(
    inventory: Inventory,
    asked: int,
    cores: int | None = None,
    cost: InstanceCost | None = None,
) -> Overload | None:
    """What is wrong with running `asked` instances of the lab at once here, or None. The usable
    cores as if idle: what others' work takes now is auto's to weigh, not a reason to warn."""
    if asked <= 1 or not entry(inventory.lab.kind).instances_share_host:
        return None
    cores = usable_cores() if cores is None else cores
    cost = instance_cost(inventory.lab.kind) if cost is None else cost
    if cost.fits(asked, cores):
        return None
    holds = cost.by_cores(cores)
    return Overload(asked=asked, holds=holds, cores=cores, lab=inventory.lab.name, cost=cost)


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
    `scenarios` scenarios that apply: as many as fit the free cores at the lab kind's measured
    cost (`InstanceCost.by_cores`) and MEMORY_SHARE of the memory available, at most one per
    scenario. A lab whose
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
    cost = instance_cost(lab.kind) if cost is None else cost
    free = max(0.0, machine.cores - machine.busy)
    by_cores = cost.by_cores(free)
    per = cost.memory_mib(inventory)
    if math.isinf(machine.mem_available_mib):  # no /proc/meminfo: the memory does not limit
        by_memory, memory = MAX_PARALLEL, "memory unknown"
    else:
        by_memory = max(1, math.floor(machine.mem_available_mib * MEMORY_SHARE / per))
        memory = (
            f"{machine.mem_available_mib / 1024:.1f} GiB available, {MEMORY_SHARE:.0%} of it "
            f"holds {by_memory} at {per:.0f} MiB each ({cost.fixed_mib:.0f} MiB + "
            f"{cost.per_node_mib:.0f} MiB x {len(inventory.nodes)} nodes)"
        )
    n = min(by_cores, by_memory, scenarios, MAX_PARALLEL)
    why = (
        f"{machine.cores} usable core(s), {machine.busy:.1f} busy, {free:.1f} free; one instance "
        f"takes {cost.figures()}, so {cost.rule()} <= {free:.1f} holds {by_cores}; {memory}; "
        f"{apply}"
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
