"""A tensor-parallel group as one LeaderWorkerSet (kubernetes-sigs/lws, API
`leaderworkerset.x-k8s.io/v1`), chosen with `gameday_lab.kubernetes.group_workload:
leaderworkerset`. Manifests only: `gameday lab manifests` prints them, and the driver keeps
running the group as StatefulSets (its restarts, per-rank configuration changes and exec work on
those); `lab up` refuses, before it creates anything, a cluster that has no LWS API.

The group is one LeaderWorkerSet named after the group, `size` = the group's hosts, one
replica. The leader template is the head's pod (engine command, probes, GPU request, tolerations,
labels, as its StatefulSet's); the worker template is the workers' `--headless` pod, one template
for all ranks: `--node-rank $(LWS_WORKER_INDEX)` and `--master-addr $(LWS_LEADER_ADDRESS)`,
the variables LWS sets in every container of the group and the kubelet expands in `args` (no
shell). LWS names the pods `<group>-0` (the leader) and `<group>-0-<index>`, under a headless
Service of its own named after the group, so the StatefulSet variant's headless Service is left
out. `restartPolicy: RecreateGroupOnPodRestart` is the whole-group restart that is
head-only-restart's recovery, given by policy; `startupPolicy: LeaderCreated` starts the
workers with the leader, as `podManagementPolicy: Parallel` does for the StatefulSets (the head
is not ready until its workers join). The command lines follow vLLM's own LWS example
(https://docs.vllm.ai/en/latest/deployment/frameworks/lws.html, multiprocessing flavour).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

from runner.errors import InventoryError, LabError
from runner.labs.kubernetes import manifests as mf
from runner.spec.inventory import Inventory, Node, Role
from runner.spec.yamlsrc import load

API_GROUP = "leaderworkerset.x-k8s.io"
API_VERSION = f"{API_GROUP}/v1"
RELEASE = "v0.8.0"
INSTALL = (
    "kubectl apply --server-side -f "
    f"https://github.com/kubernetes-sigs/lws/releases/download/{RELEASE}/manifests.yaml"
)
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
RANK_FLAGS = {"--node-rank": WORKER_INDEX, "--master-addr": LEADER_ADDRESS}
SCHEMA_FILE = "data/lws-v1-crd-schema.json"  # its source and changes: the .source.md beside it
FIELD = "all.vars.gameday_lab.kubernetes.group_workload"


def members(inventory: Inventory, group: str) -> tuple[Node, list[Node]]:
    """The group's head and its workers, in worker-index order; InventoryError when the group
    cannot be one LeaderWorkerSet (not exactly one head; ranks not 0 for the head and
    1..size-1 for the workers; workers that differ in more than their rank)."""
    nodes = [n for n in inventory.nodes if mf.is_grouped(n) and mf.group_of(inventory, n) == group]
    heads = [n for n in nodes if n.role is Role.HEAD]
    if len(heads) != 1:
        raise _bad(inventory, group, f"has {len(heads)} heads; a LeaderWorkerSet has one leader")
    head = heads[0]
    workers = sorted((n for n in nodes if n.role is Role.WORKER), key=_rank)
    ranks = [_rank(n) for n in (head, *workers)]
    if ranks != list(range(len(nodes))):
        raise _bad(
            inventory,
            group,
            f"has --node-rank {ranks} (head first); LWS numbers the leader 0 and the workers "
            f"1..{len(nodes) - 1}",
        )
    for w in workers[1:]:
        if (_template_args(w), w.env, w.gpu) != (
            _template_args(workers[0]),
            workers[0].env,
            workers[0].gpu,
        ):
            raise _bad(
                inventory,
                group,
                f"workers {workers[0].name} and {w.name} differ in more than --node-rank; "
                "a LeaderWorkerSet has one worker template",
            )
    return head, workers


def _rank(node: Node) -> int:
    args = node.rendered_args()
    value = mf._flag(args, "--node-rank", "0")
    return int(value) if value.isdigit() else -1


def _template_args(node: Node) -> list[str]:
    """The node's args with its rank and its leader's address as LWS's variables."""
    args = node.rendered_args()
    for i in range(len(args) - 1):
        if args[i] in RANK_FLAGS:
            args[i + 1] = RANK_FLAGS[args[i]]
    return args


def _bad(inventory: Inventory, group: str, what: str) -> InventoryError:
    src = load(inventory.path, InventoryError, "inventory")
    return InventoryError(
        f"group {group!r} {what}",
        file=inventory.path,
        line=src.line_of(tuple(FIELD.split("."))),
        field=FIELD,
        hint="group_workload: statefulsets runs any group; see docs/labs/kubernetes.md "
        "'A group as a LeaderWorkerSet (manifests only)'",
    )


def _template(inventory: Inventory, node: Node, pod_labels: dict[str, str]) -> dict[str, Any]:
    pod = mf._pod_spec(inventory, node, None)
    pod["containers"][0]["args"] = _template_args(node)
    return {"metadata": {"labels": pod_labels}, "spec": pod}


def leaderworkerset(inventory: Inventory, group: str) -> dict[str, Any]:
    """The group as one LeaderWorkerSet."""
    head, workers = members(inventory, group)
    in_group = {mf.GROUP_LABEL: group}
    lwt: dict[str, Any] = {
        "size": 1 + len(workers),
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": _template(inventory, head, mf.labels(inventory, head.name) | in_group),
    }
    if workers:
        lwt["workerTemplate"] = _template(inventory, workers[0], mf.labels(inventory) | in_group)
    else:  # the CRD requires a worker template; size 1 creates no worker
        lwt["workerTemplate"] = copy.deepcopy(lwt["leaderTemplate"])
    return {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": group,
            "namespace": mf.spec_of(inventory).namespace,
            "labels": mf.labels(inventory) | in_group,
        },
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": lwt,
        },
    }


def all_manifests(inventory: Inventory) -> list[dict[str, Any]]:
    """The lab's manifests with each tensor-parallel group as a LeaderWorkerSet (LWS makes the
    group's headless Service; a group of servers keeps gameday's)."""
    return [
        mf.namespace(inventory),
        mf.service(inventory),
        *(mf.headless_service(inventory, g) for g in mf.peer_groups(inventory)),
        *(mf.workload(inventory, n) for n in inventory.nodes if not mf.is_grouped(n)),
        *(leaderworkerset(inventory, g) for g in mf.groups(inventory)),
    ]


def pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A LeaderWorkerSet's leader and worker templates, each wrapped in a core v1 PodTemplate
    (the CRD embeds core PodTemplateSpecs: this is how the core schema checks them)."""
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return [
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{doc['metadata']['name']}-{role}"},
            "template": lwt[key],
        }
        for role, key in (("leader", "leaderTemplate"), ("worker", "workerTemplate"))
        if key in lwt
    ]


def crd_schema(strict: bool = True) -> dict[str, Any]:
    """The LeaderWorkerSet CRD's openAPIV3Schema (pod specs pruned, see the .source.md); strict:
    unknown fields rejected, as the API server's strict field validation does."""
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return _closed(schema) if strict else schema


def _closed(node: Any) -> Any:
    if isinstance(node, list):
        return [_closed(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def require_api(kube: Any) -> None:
    """LabError (exit 3) when the cluster serves no LeaderWorkerSet API: LWS is not installed.
    `kube` is the driver's runner.labs.kubernetes.api.KubeApi."""
    from kubernetes import client

    discover = client.CustomObjectsApi(kube.client).get_api_resources
    status, _ = kube.status_of(discover, API_GROUP, "v1")
    if status == 404:
        raise LabError(
            f"the cluster serves no {API_VERSION} API (LeaderWorkerSet is not installed), and "
            "group_workload is leaderworkerset: nothing was created",
            hint=f"install LWS {RELEASE}: {INSTALL}",
        )
    if status != 200:
        kube.call(f"discover {API_VERSION}", discover, API_GROUP, "v1")
