"""The compose lab kind's registry entry (runner.labs.registry)."""

from __future__ import annotations

from runner.errors import InputError
from runner.labs.base import LabDriver
from runner.labs.common.alertmanager_config import alerts_api
from runner.labs.compose.configs import receiver_listen
from runner.labs.compose.inventory_rules import check_adoption, check_hosts
from runner.labs.cost import InstanceCost
from runner.labs.local.kind import COST as LOCAL_COST
from runner.labs.registry import BuiltImage, LabKindEntry, Progress
from runner.spec.inventory import Inventory
from runner.spec.kinds import LabKind


def _driver(inventory: Inventory) -> LabDriver:
    from runner.labs.compose.driver import ComposeLab

    return ComposeLab(inventory)


def _adopted(inventory: Inventory) -> LabDriver:
    from runner.labs.compose.adopt import AdoptedComposeLab

    return AdoptedComposeLab(inventory)


def _check_instances(inventory: Inventory, n: int) -> None:
    from runner.labs.compose import instance

    instance.check_instances(inventory, n)


def _instance(inventory: Inventory, k: int) -> Inventory:
    from runner.labs.compose import instance

    return instance.instance(inventory, k)


def _build(inventory: Inventory, progress: Progress, force: bool) -> BuiltImage:
    from runner.labs.compose.build import build

    if inventory.lab.compose is None:
        raise InputError(
            f"lab {inventory.lab.name!r} is a compose lab: it has no images",
            file=inventory.path,
            hint="gameday lab build --lab inventories/compose.yaml",
        )
    return build(inventory.lab.compose, progress, force=force)


# Not measured on the compose lab itself yet: the local lab's figures (runner/labs/local), whose
# programs the compose lab's containers run. Containers add Docker's shims and bridge networking,
# which these leave out.
COST = InstanceCost(
    measured=LOCAL_COST.measured,
    by=f"{LOCAL_COST.by} (the same programs, in containers)",
    cpu_mean=LOCAL_COST.cpu_mean,
    cpu_peak=LOCAL_COST.cpu_peak,
    fixed_mib=LOCAL_COST.fixed_mib,
    per_node_mib=LOCAL_COST.per_node_mib,
)

ENTRY = LabKindEntry(
    kind=LabKind.COMPOSE,
    driver=_driver,
    adopted=_adopted,
    check_instances=_check_instances,
    instance=_instance,
    receiver_listen=receiver_listen,
    check_hosts=check_hosts,
    check_adoption=check_adoption,
    alertmanager_api=alerts_api,
    build=_build,
    instance_cost=COST,
)
