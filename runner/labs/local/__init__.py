"""The embedded local lab: engine nodes as local processes, each on its own loopback address,
supervised by a small daemon (supervisor.py) that the driver (driver.py) talks to."""

from __future__ import annotations

from collections.abc import Sequence

from runner.labs.base import LabDriver
from runner.labs.common.adoption_rules import ADOPT_LOC, fail, refuse_services
from runner.labs.common.alertmanager_config import alerts_api, receiver_listen
from runner.labs.registry import HostLines, LabKindEntry
from runner.spec.inventory import Inventory, LabSpec, Node
from runner.spec.kinds import LabKind
from runner.spec.yamlsrc import Source


def _driver(inventory: Inventory) -> LabDriver:
    from runner.labs.local.driver import LocalLab

    return LocalLab(inventory)


def _check_instances(inventory: Inventory, n: int) -> None:
    from runner.labs.local import instance

    instance.check_instances(inventory, n)


def _instance(inventory: Inventory, k: int) -> Inventory:
    from runner.labs.local import instance

    return instance.instance(inventory, k)


def _check_hosts(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    if lab.adopt is not None:
        fail(
            src,
            ADOPT_LOC,
            ".".join(ADOPT_LOC),
            "a local lab cannot adopt a deployment: its nodes are processes gameday starts",
            "adopt a Compose project (kind: compose) or a Kubernetes workload (kind: kubernetes)",
        )
    refuse_services(src, nodes, hosts)


ENTRY = LabKindEntry(
    kind=LabKind.LOCAL,
    driver=_driver,
    adopted=None,
    check_instances=_check_instances,
    instance=_instance,
    receiver_listen=receiver_listen,
    check_hosts=_check_hosts,
    alertmanager_api=alerts_api,
)
