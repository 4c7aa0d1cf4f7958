"""Checks of an inventory's `gameday_lab.adopt:` (a deployment the team already runs), each
naming the file, line and field of what is wrong."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from runner.errors import InventoryError
from runner.scenario import LabKind
from runner.yamlsrc import Source

if TYPE_CHECKING:
    from runner.inventory import LabSpec, Node

HINT = "see README.md 'Adopting a deployment you already run'"
ADOPT_LOC = ("all", "vars", "gameday_lab", "adopt")


def check_adoption(
    src: Source, lab: LabSpec, nodes: Sequence[Node], host_lines: dict[str, tuple[Any, ...]]
) -> None:
    """InventoryError unless `adopt:` fits the lab's kind and its hosts map onto what it
    adopts; `gameday_service` only on an adopted compose lab."""
    adopt = lab.adopt
    if adopt is not None and lab.kind is LabKind.LOCAL:
        _fail(
            src,
            ADOPT_LOC,
            ".".join(ADOPT_LOC),
            "a local lab cannot adopt a deployment: its nodes are processes gameday starts",
            "adopt a Compose project (kind: compose) or a Kubernetes workload (kind: kubernetes)",
        )
    compose_adopted = adopt is not None and lab.kind is LabKind.COMPOSE
    for n in nodes:
        if n.service is not None and not compose_adopted:
            _fail(
                src,
                (*host_lines[n.name], "gameday_service"),
                f"{n.name}.gameday_service",
                "gameday_service maps a host onto a service of an adopted Compose project; "
                "this lab adopts none",
                "add gameday_lab.adopt: {project: NAME} to a compose lab, or remove it",
            )
    if adopt is None:
        return
    if lab.monitoring is not None:
        loc = ("all", "vars", "gameday_lab", "monitoring")
        _fail(
            src,
            loc,
            ".".join(loc),
            "an adopted deployment has no Prometheus that gameday runs: monitoring is for the "
            "labs gameday creates",
            "point gameday_lab.prometheus_url at your own Prometheus instead",
        )
    if lab.kind is LabKind.COMPOSE:
        _check_compose(src, lab, nodes, host_lines)
    else:
        _check_kubernetes(src, lab, nodes, host_lines)


def _check_compose(
    src: Source, lab: LabSpec, nodes: Sequence[Node], host_lines: dict[str, tuple[Any, ...]]
) -> None:
    adopt = lab.adopt
    assert adopt is not None
    for key in ("deployment", "statefulset", "container"):
        if getattr(adopt, key) is not None:
            _fail(
                src,
                (*ADOPT_LOC, key),
                ".".join((*ADOPT_LOC, key)),
                f"adopt.{key} is for Kubernetes labs; a compose lab adopts a project",
                "adopt: {project: NAME} (the Compose project name, `docker compose ls`)",
            )
    if adopt.project is None:
        _fail(
            src,
            ADOPT_LOC,
            ".".join((*ADOPT_LOC, "project")),
            "a compose lab adopts a Compose project: adopt.project is missing",
            "adopt: {project: NAME} (the Compose project name, `docker compose ls`)",
        )
    seen: dict[str, str] = {}
    for n in nodes:
        svc = n.service or n.name
        if svc in seen:
            _fail(
                src,
                (*host_lines[n.name], "gameday_service"),
                f"{n.name}.gameday_service",
                f"hosts {seen[svc]} and {n.name} are both service {svc!r}",
                "each host is one service of the project (gameday_service: NAME)",
            )
        seen[svc] = n.name


def _check_kubernetes(
    src: Source, lab: LabSpec, nodes: Sequence[Node], host_lines: dict[str, tuple[Any, ...]]
) -> None:
    adopt = lab.adopt
    assert adopt is not None
    if adopt.project is not None:
        _fail(
            src,
            (*ADOPT_LOC, "project"),
            ".".join((*ADOPT_LOC, "project")),
            "adopt.project is for compose labs; a Kubernetes lab adopts a workload",
            "adopt: {deployment: NAME} or {statefulset: NAME}",
        )
    if (adopt.deployment is None) == (adopt.statefulset is None):
        _fail(
            src,
            ADOPT_LOC,
            ".".join(ADOPT_LOC),
            "a Kubernetes lab adopts one workload: give adopt.deployment or adopt.statefulset, "
            "not both, not neither",
            "adopt: {deployment: NAME} (in the namespace gameday_lab.kubernetes.namespace)",
        )
    if len(nodes) != 1 or nodes[0].role.value != "serving":
        n = nodes[1] if len(nodes) > 1 else nodes[0]
        _fail(
            src,
            host_lines[n.name],
            n.name,
            "an adopted Kubernetes workload is one serving node: the inventory has "
            + (f"{len(nodes)} hosts" if len(nodes) > 1 else f"a {n.role.value}"),
            "list one host with gameday_role: serving",
        )


def _fail(src: Source, loc: tuple[Any, ...], field: str, msg: str, hint: str) -> NoReturn:
    raise InventoryError(
        msg, file=src.path, line=src.line_of(loc), field=field, hint=f"{hint}; {HINT}"
    )
