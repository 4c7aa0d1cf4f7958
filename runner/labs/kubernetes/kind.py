"""The Kubernetes lab kind's registry entry (runner.labs.registry)."""

from __future__ import annotations

from runner.labs.base import LabDriver
from runner.labs.common.alertmanager_config import receiver_listen
from runner.labs.kubernetes.inventory_rules import check_adoption, check_hosts, check_lab
from runner.labs.registry import LabKindEntry
from runner.spec.inventory import Inventory
from runner.spec.kinds import LabKind


def _driver(inventory: Inventory) -> LabDriver:
    from runner.labs.kubernetes.driver import KubernetesLab

    return KubernetesLab(inventory)


def _adopted(inventory: Inventory) -> LabDriver:
    from runner.labs.kubernetes.adopt import AdoptedKubernetesLab

    return AdoptedKubernetesLab(inventory)


def _check_instances(inventory: Inventory, n: int) -> None:
    from runner.labs.kubernetes import instance

    instance.check_instances(inventory, n)


def _instance(inventory: Inventory, k: int) -> Inventory:
    from runner.labs.kubernetes import instance

    return instance.instance(inventory, k)


def _manifests(inventory: Inventory, scenario_objects: bool) -> str:
    """What `lab up` applies (a Secret's token masked), or what scenarios create (a stray GPU
    pod), as YAML documents."""
    from runner.labs.kubernetes.lab_objects import all_manifests
    from runner.labs.kubernetes.manifests import dump_all
    from runner.labs.kubernetes.stray import scenario_manifests

    return dump_all(scenario_manifests(inventory) if scenario_objects else all_manifests(inventory))


ENTRY = LabKindEntry(
    kind=LabKind.KUBERNETES,
    driver=_driver,
    adopted=_adopted,
    check_instances=_check_instances,
    instance=_instance,
    receiver_listen=receiver_listen,
    check_lab=check_lab,
    check_hosts=check_hosts,
    check_adoption=check_adoption,
    manifests=_manifests,
    instances_share_host=False,
)
