"""What the kinds' inventory rules share: the adoption section's place in the file, its hint,
the rule that `gameday_service` belongs to an adopted Compose project only, and that
`gameday_kubernetes_node` belongs to a Kubernetes lab."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from runner.errors import InventoryError
from runner.spec.inventory import Node
from runner.spec.yamlsrc import Source

ADOPT_HINT = "see docs/inventories.md 'Adopting a deployment you already run'"
ADOPT_LOC = ("all", "vars", "gameday_lab", "adopt")


def fail(src: Source, loc: tuple[Any, ...], field: str, msg: str, hint: str) -> NoReturn:
    raise InventoryError(
        msg, file=src.path, line=src.line_of(loc), field=field, hint=f"{hint}; {ADOPT_HINT}"
    )


def refuse_kubernetes_node(
    src: Source, nodes: Sequence[Node], host_lines: Mapping[str, tuple[Any, ...]], kind: str
) -> None:
    """InventoryError for a host's gameday_kubernetes_node: this lab places no pods."""
    for n in nodes:
        if n.kubernetes_node is not None:
            loc = (*host_lines[n.name], "gameday_kubernetes_node")
            raise InventoryError(
                f"gameday_kubernetes_node places a host's pod on a Kubernetes node; this is a "
                f"{kind} lab",
                file=src.path,
                line=src.line_of(loc),
                field=f"{n.name}.gameday_kubernetes_node",
                hint="remove it, or use it in an inventory whose gameday_lab.kind is kubernetes",
            )


def refuse_commands(
    src: Source, nodes: Sequence[Node], host_lines: Mapping[str, tuple[Any, ...]]
) -> None:
    """InventoryError for a host's gameday_command or gameday_health_path: on this lab every
    node is an engine started by gameday_lab.engine_command and ready on /health."""
    for n in nodes:
        for key, given in (
            ("gameday_command", n.command is not None),
            ("gameday_health_path", n.health_path != "/health"),
        ):
            if given:
                fail(
                    src,
                    (*host_lines[n.name], key),
                    f"{n.name}.{key}",
                    f"{key} (a node that is not an engine, such as a proxy) is for compose "
                    "and Kubernetes labs; on this lab every node runs gameday_lab.engine_command",
                    f"remove {key}, or run this topology on a compose or Kubernetes lab",
                )


def refuse_services(
    src: Source, nodes: Sequence[Node], host_lines: Mapping[str, tuple[Any, ...]]
) -> None:
    """InventoryError for any host's gameday_service: this lab adopts no Compose project."""
    for n in nodes:
        if n.service is not None:
            fail(
                src,
                (*host_lines[n.name], "gameday_service"),
                f"{n.name}.gameday_service",
                "gameday_service maps a host onto a service of an adopted Compose project; "
                "this lab adopts none",
                "add gameday_lab.adopt: {project: NAME} to a compose lab, or remove it",
            )
