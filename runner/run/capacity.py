"""How many isolated lab instances this machine holds before their probes starve.

Every instance of a lab that runs on this machine (the local lab's processes, the compose lab's
containers) runs its engines, its Prometheus and Alertmanager, and the runner's probes of it. The
probes are timed: a correctness probe under load, a delivery deadline, a time-to-recover window
at x100 where one starved wall second reads as 100 real-world seconds. So the instances must fit
the cores with room for their busiest moments, and a run asked for more is told so before it
starts, in its terminal and in each scenario's notes, rather than meeting the starvation as an
error halfway.

What one instance takes is measured, per lab kind, by `bench/instance_cost.py` (one instance
running the scenarios of scenarios/ serially, read from /proc), and kept as constants in the
kind's package (`runner/labs/<kind>/kind.py`, the registry entry's `instance_cost`) with the
date and the command of their measurement: its CPU on average and in its busiest second while
its scenarios run (its bring-up left out: all instances come up at once, which the room for one
peak below does not cover, and a window missed only for that contention is inconclusive), the
runner's share included, and its memory at its parts' peaks (runner/labs/cost.py).
n instances fit when

    n x mean + (peak - mean) <= free cores,   n x memory <= MEMORY_SHARE x MemAvailable

(every instance at its mean, and room for one of them at its peak: the instances' busy moments are
scenario steps that do not line up). Free cores are the usable ones less what other work keeps
busy, read from /proc/stat's counters less this process's own CPU, from the command's start
(runner.procstat.STARTED) over at least BUSY_WINDOW_S (`busy_cores`): the command's own start-up
is the watch, not a wait of its own.

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

from runner import procstat
from runner.errors import InputError
from runner.labs.cost import InstanceCost
from runner.labs.registry import entry
from runner.procstat import CpuMark, cpu_mark
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
# a command's start older than this says nothing of the load now (a long-lived process)
STARTED_FRESH_S = 10.0


def instance_cost(kind: LabKind) -> InstanceCost:
    """One instance's measured cost on a lab kind whose instances share this machine (each
    kind's figures are in its package, beside the command and date of their measurement)."""
    cost = entry(kind).instance_cost
    if cost is None:
        raise ValueError(f"lab kind {kind} has no measured cost on this machine")
    return cost


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
    holds = min(cost.by_cores(cores), MAX_PARALLEL)
    return Overload(asked=asked, holds=holds, cores=cores, lab=inventory.lab.name, cost=cost)


@dataclass(frozen=True)
class Machine:
    """This machine as auto sees it: usable cores, how many of them are already busy, and the
    memory available (MemAvailable)."""

    cores: int
    busy: float
    mem_available_mib: float


def busy_cores(window_s: float = BUSY_WINDOW_S, since: CpuMark | None = None) -> float:
    """How many of the usable cores other work keeps busy, from /proc/stat's counters of those
    cores (a CI container's CPU set, not the host's) less this process's own CPU, over at
    least `window_s` from `since` (default: the process's start, procstat.STARTED), waiting
    for what is left of it. 0 where there is no /proc/stat."""
    start = since or procstat.STARTED
    if start is None or time.monotonic() - start.at > STARTED_FRESH_S:
        start = cpu_mark()  # no command start, or one too long ago to say how busy it is now
    if start is None:
        return 0.0
    left = window_s - (time.monotonic() - start.at)
    if left > 0:
        time.sleep(left)
    end = cpu_mark()
    return start.others_busy(end) if end is not None else 0.0


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
    by_cores = min(cost.by_cores(free), MAX_PARALLEL)
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
