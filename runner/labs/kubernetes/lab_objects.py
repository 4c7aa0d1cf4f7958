"""Everything `lab up` creates on a Kubernetes lab, in order: the namespace and Services
(runner.labs.kubernetes.manifests), the monitoring (runner.labs.kubernetes.monitoring) and the
engines' workloads, each tensor-parallel group as one LeaderWorkerSet where the inventory asks
(runner.labs.kubernetes.lws). A module of its own because it is built on all three."""

from __future__ import annotations

from typing import Any

from runner.labs.kubernetes import lws, monitoring
from runner.labs.kubernetes.manifests import (
    headless_groups,
    headless_service,
    namespace,
    service,
    spec_of,
    workload,
)
from runner.spec.inventory import GroupWorkload, Inventory


def all_manifests(inventory: Inventory) -> list[dict[str, Any]]:
    """Everything `lab up` creates, in order (a Secret's token masked; with group_workload
    leaderworkerset, each group is one LeaderWorkerSet: runner.labs.kubernetes.lws)."""
    if spec_of(inventory).group_workload is GroupWorkload.LEADERWORKERSET:
        return [*lws.all_manifests(inventory), *monitoring.manifests(inventory)]
    return [
        namespace(inventory),
        service(inventory),
        *(headless_service(inventory, g) for g in headless_groups(inventory)),
        *monitoring.manifests(inventory),
        *(workload(inventory, n) for n in inventory.nodes),
    ]
