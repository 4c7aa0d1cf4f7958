"""The inventory rules only a local lab has: it adopts nothing (its nodes are processes gameday
starts), so it has no Compose services either; and its nodes listen on this machine, so a node's
address that is a host name must be one this machine resolves."""

from __future__ import annotations

from collections.abc import Sequence

from runner.errors import InventoryError
from runner.labs.common.adoption_rules import (
    ADOPT_LOC,
    fail,
    refuse_commands,
    refuse_kubernetes_node,
    refuse_services,
)
from runner.labs.common.network import resolution_error
from runner.labs.registry import HostLines
from runner.spec.inventory import LabSpec, Node
from runner.spec.yamlsrc import Source


def check_hosts(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    if lab.adopt is not None:
        fail(
            src,
            ADOPT_LOC,
            ".".join(ADOPT_LOC),
            "a local lab cannot adopt a deployment: its nodes are processes gameday starts",
            "adopt a Compose project (kind: compose) or a Kubernetes workload (kind: kubernetes)",
        )
    refuse_services(src, nodes, hosts)
    refuse_commands(src, nodes, hosts)
    refuse_kubernetes_node(src, nodes, hosts, "local")
    check_addresses(src, nodes, hosts)


def check_addresses(src: Source, nodes: Sequence[Node], hosts: HostLines) -> None:
    """InventoryError for a node address (gameday_address, _management_, _overlay_) that is a
    host name this machine does not resolve: the lab would find out only when it binds it."""
    for n in nodes:
        for key, value in (
            ("gameday_address", n.address),
            ("gameday_management_address", n.management_address),
            ("gameday_overlay_address", n.overlay_address),
        ):
            if value is None or (why := resolution_error(value)) is None:
                continue
            raise InventoryError(
                f"{value!r} is neither an IP address nor a host name this machine resolves ({why})",
                file=src.path,
                line=src.line_of((*hosts[n.name], key)),
                field=f"{n.name}.{key}",
                hint="a local lab's node listens on this machine: give one of its addresses "
                "(any of 127.0.0.0/8 is)",
            )
