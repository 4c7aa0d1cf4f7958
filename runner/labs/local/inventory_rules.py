"""The inventory rules only a local lab has: it adopts nothing (its nodes are processes gameday
starts), so it has no Compose services either."""

from __future__ import annotations

from collections.abc import Sequence

from runner.labs.common.adoption_rules import ADOPT_LOC, fail, refuse_services
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
