"""The inventory rules only a compose lab has: what an adopted Compose project needs, and
`gameday_service` (a host as one of its services) only there."""

from __future__ import annotations

from collections.abc import Sequence

from runner.labs.common.adoption_rules import (
    ADOPT_LOC,
    fail,
    refuse_kubernetes_node,
    refuse_services,
)
from runner.labs.registry import HostLines
from runner.spec.inventory import LabSpec, Node
from runner.spec.yamlsrc import Source


def check_hosts(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    if lab.adopt is None:
        refuse_services(src, nodes, hosts)
    refuse_kubernetes_node(src, nodes, hosts, "compose")


def check_adoption(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    adopt = lab.adopt
    assert adopt is not None
    for key in ("deployment", "statefulset", "container"):
        if getattr(adopt, key) is not None:
            fail(
                src,
                (*ADOPT_LOC, key),
                ".".join((*ADOPT_LOC, key)),
                f"adopt.{key} is for Kubernetes labs; a compose lab adopts a project",
                "adopt: {project: NAME} (the Compose project name, `docker compose ls`)",
            )
    if adopt.project is None:
        fail(
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
            fail(
                src,
                (*hosts[n.name], "gameday_service"),
                f"{n.name}.gameday_service",
                f"hosts {seen[svc]} and {n.name} are both service {svc!r}",
                "each host is one service of the project (gameday_service: NAME)",
            )
        seen[svc] = n.name
