"""What a scenario needs of its lab beyond (re)configuring and restarting nodes, and whether a lab
has it: a scenario that needs what its lab lacks is reported as "not on this lab: <reason>" when
it is validated against the lab and when a run is planned, never refused half-way through."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from runner.labs.base import Capability, LabDriver
from runner.spec.actions import ChangeAddress, ScrapeTargets, Signal, StartProcess, StopProcess
from runner.spec.probes import GpuProcessesProbe, PromQLProbe, TargetsProbe
from runner.spec.scenario import Scenario

WHAT: dict[Capability, str] = {
    Capability.PROCESSES: "start or stop a program on a node (node access)",
    Capability.SIGNALS: "signal a process inside a node (exec)",
    Capability.GPU_PROCESSES: "list the processes on a node's GPU",
    Capability.ADDRESSES: "move a node's address (DHCP)",
    Capability.MONITORING: "run the lab's Prometheus",
    Capability.ALERT_DELIVERY: "deliver alerts to the runner's receiver (set "
    "gameday_lab.monitoring.receiver_listen to an address the lab's pods reach)",
    Capability.SERVICE_LINKS: "create Services whose variables the runtime injects",
}

NEEDS: dict[type[BaseModel], Capability] = {
    StartProcess: Capability.PROCESSES,
    StopProcess: Capability.PROCESSES,
    Signal: Capability.SIGNALS,
    GpuProcessesProbe: Capability.GPU_PROCESSES,
    ChangeAddress: Capability.ADDRESSES,
    ScrapeTargets: Capability.MONITORING,
    TargetsProbe: Capability.MONITORING,
    PromQLProbe: Capability.MONITORING,
}


@dataclass(frozen=True)
class Need:
    capability: Capability
    where: str  # the scenario's field that needs it ("inject[0]", "detect.alerts")


def needs(sc: Scenario) -> list[Need]:
    """Every capability the scenario needs, with the first field that needs it."""
    found: dict[Capability, str] = {}
    parts: list[tuple[str, list[BaseModel]]] = [
        ("baseline.setup", list(sc.baseline.setup)),
        ("inject", list(sc.inject)),
        ("baseline.probes", list(sc.baseline.probes)),
        ("expect.probes", list(sc.expect.probes)),
        ("verify.probes", list(sc.verify.probes)),
    ]
    parts += [(f"recover[{i}].actions", list(step.actions)) for i, step in enumerate(sc.recover)]
    parts += [(f"recover[{i}].reveal", list(step.reveal)) for i, step in enumerate(sc.recover)]
    for where, items in parts:
        for i, item in enumerate(items):
            cap = NEEDS.get(type(item))
            if cap is not None:
                found.setdefault(cap, f"{where}[{i}] ({getattr(item, 'kind', '')})")
    if sc.detect.alerts:
        found.setdefault(Capability.MONITORING, "detect.alerts")
    for i, alert in enumerate(sc.detect.alerts):
        if alert.delivered:
            found.setdefault(Capability.ALERT_DELIVERY, f"detect.alerts[{i}] (delivered)")
    return [Need(c, w) for c, w in found.items()]


def lacking(sc: Scenario, lab: LabDriver) -> list[str]:
    """Why the scenario cannot run on this lab (empty: it can): one reason per capability of
    the scenario as this lab runs it (its per_lab, per_vllm and per_platform sections included),
    and one where its target restarts by a policy the scenario is not about (target_restart)."""
    sc = sc.for_lab(lab.kind, lab.inventory.lab.vllm_version, lab.inventory.lab.platform)
    reasons = [
        f"not on this lab: the {lab.label} cannot {WHAT[n.capability]}, which {n.where} needs"
        for n in needs(sc)
        if n.capability not in lab.capabilities
    ]
    targets = lab.inventory.resolve(sc.target)
    if sc.target_restart and targets:
        wrong = sorted({n.restart.value for n in targets} - {p.value for p in sc.target_restart})
        if wrong:
            reasons.append(
                f"not on this lab: {sc.target} restarts by policy {', '.join(wrong)}, and the "
                f"scenario is about a node whose policy is {' or '.join(sc.target_restart)} "
                "(target_restart)"
            )
    return reasons
