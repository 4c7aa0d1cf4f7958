"""The inventory rules only a Kubernetes lab has: a named kube context, an image of the lab's
vLLM release, and what an adopted workload needs."""

from __future__ import annotations

import re
from collections.abc import Sequence

from runner.errors import InventoryError
from runner.labs.common.adoption_rules import ADOPT_LOC, fail, refuse_services
from runner.labs.registry import HostLines
from runner.spec.inventory import LabSpec, Node
from runner.spec.yamlsrc import Source
from vllmfacts.wording import Era

VLLM_IMAGE = re.compile(r"^(?:docker\.io/)?vllm/vllm-openai:v(?P<era>\d+\.\d+)\.\d+")


def check_lab(src: Source, lab: LabSpec) -> None:
    if lab.kubernetes is None or lab.kubernetes.context is None:
        loc = ("all", "vars", "gameday_lab", "kubernetes")
        raise InventoryError(
            "a Kubernetes lab names its kube context: gameday creates and labels a namespace "
            "there, and never in whichever cluster is the current context",
            file=src.path,
            line=src.line_of(loc),
            field=".".join((*loc, "context")),
            hint="set gameday_lab.kubernetes.context to your cluster's context "
            "(`kubectl config get-contexts` lists them); see inventories/eks.yaml",
        )
    _image_matches_version(src, lab)


def _image_matches_version(src: Source, lab: LabSpec) -> None:
    """vLLM's own image names its release: one that is not the lab's vllm_version would run one
    vLLM while the scenarios are resolved for another."""
    assert lab.kubernetes is not None
    m = VLLM_IMAGE.match(lab.kubernetes.image)
    if m is None or m["era"] == lab.vllm_version.value:
        return
    given = "image" in lab.kubernetes.model_fields_set
    loc = ("all", "vars", "gameday_lab", *(("kubernetes", "image") if given else ("vllm_version",)))
    known = {e.value for e in Era}
    other = (
        f'or vllm_version to "{m["era"]}"'
        if m["era"] in known
        else f"(gameday knows vLLM {' and '.join(sorted(known))}: the scenarios' expectations "
        "are written against those releases' words)"
    )
    raise InventoryError(
        f"the image {lab.kubernetes.image} is vLLM {m['era']}, but vllm_version is "
        f"{lab.vllm_version.value!r}",
        file=src.path,
        line=src.line_of(loc),
        field=".".join(loc),
        hint=f"set gameday_lab.kubernetes.image to vllm/vllm-openai:v{lab.vllm_version.version} "
        + other,
    )


def check_hosts(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    refuse_services(src, nodes, hosts)


def check_adoption(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    adopt = lab.adopt
    assert adopt is not None
    if adopt.project is not None:
        fail(
            src,
            (*ADOPT_LOC, "project"),
            ".".join((*ADOPT_LOC, "project")),
            "adopt.project is for compose labs; a Kubernetes lab adopts a workload",
            "adopt: {deployment: NAME} or {statefulset: NAME}",
        )
    if (adopt.deployment is None) == (adopt.statefulset is None):
        fail(
            src,
            ADOPT_LOC,
            ".".join(ADOPT_LOC),
            "a Kubernetes lab adopts one workload: give adopt.deployment or adopt.statefulset, "
            "not both, not neither",
            "adopt: {deployment: NAME} (in the namespace gameday_lab.kubernetes.namespace)",
        )
    if len(nodes) != 1 or nodes[0].role.value != "serving":
        n = nodes[1] if len(nodes) > 1 else nodes[0]
        fail(
            src,
            hosts[n.name],
            n.name,
            "an adopted Kubernetes workload is one serving node: the inventory has "
            + (f"{len(nodes)} hosts" if len(nodes) > 1 else f"a {n.role.value}"),
            "list one host with gameday_role: serving",
        )
