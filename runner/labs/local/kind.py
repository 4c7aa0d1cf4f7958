"""The local lab kind's registry entry (runner.labs.registry) and its measured cost per instance."""

from __future__ import annotations

from runner.labs.base import LabDriver
from runner.labs.common.alertmanager_config import alerts_api, receiver_listen
from runner.labs.cost import InstanceCost
from runner.labs.local.inventory_rules import check_hosts
from runner.labs.registry import LabKindEntry
from runner.spec.inventory import Inventory
from runner.spec.kinds import LabKind


def _driver(inventory: Inventory) -> LabDriver:
    from runner.labs.local.driver import LocalLab

    return LocalLab(inventory)


def _check_instances(inventory: Inventory, n: int) -> None:
    from runner.labs.local import instance

    instance.check_instances(inventory, n)


def _instance(inventory: Inventory, k: int) -> Inventory:
    from runner.labs.local import instance

    return instance.instance(inventory, k)


# One instance running the scenarios of scenarios/ serially at x100 on 2 cores, measured by
# `python bench/instance_cost.py --lab inventories/local.yaml` on 2026-12-05, the machine quiet
# (it prints these figures; bench/RESULTS.md has the run's)
COST = InstanceCost(
    measured="2026-12-05 on 2 cores",
    by="bench/instance_cost.py --lab inventories/local.yaml",
    cpu_mean=0.35,
    cpu_peak=0.84,
    fixed_mib=190.6,
    per_node_mib=57.7,
)

ENTRY = LabKindEntry(
    kind=LabKind.LOCAL,
    driver=_driver,
    adopted=None,
    check_instances=_check_instances,
    instance=_instance,
    receiver_listen=receiver_listen,
    check_hosts=check_hosts,
    alertmanager_api=alerts_api,
    engine_on_host=True,
    instance_cost=COST,
)
