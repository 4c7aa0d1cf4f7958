"""The Kubernetes lab's manifests, modelled on the EKS start-failure write-up's baseline
(vllm-baseline.yaml): Namespace, Service `vllm`, and a Deployment per single-node server with
`strategy: Recreate` (one GPU cannot be held by two pods at once), the GPU toleration and node
selector, `nvidia.com/gpu: 1`, startup and readiness probes on /health, a memory-backed /dev/shm,
an HF cache volume and `enableServiceLinks` stated explicitly.

A tensor-parallel group (head and workers) is a StatefulSet per node (a stable pod name
`<node>-0`, each rank with its own args) under one headless Service named after the group, so the
head has a stable DNS name for `--master-addr` (`node1-0.tp-group.<namespace>.svc.cluster.local`);
`podManagementPolicy: Parallel`, since the head is not ready until its workers join. Workers are
headless (no HTTP): no probes.

A serving node that shares an inventory group with other hosts (a prefill and a decode engine and
the proxy in front of them, group `pd`) is a StatefulSet too, under the group's headless Service:
its peers reach it at a stable DNS name (`prefill-0.pd.<namespace>.svc.cluster.local`), as a
compose service is reached at its name, and an engine binds its KV-transfer side channel there
(a name that resolves to its own pod's IP, which a Service's ClusterIP is not). A node with a
command of its own (`gameday_command`, the proxy) runs that in place of the lab's engine command,
and its probes ask its `gameday_health_path`.

Everything here is a plain dict in the shape the API server takes: the driver sends exactly these,
`gameday lab manifests` prints them, and the tests validate them against the Kubernetes schemas.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from runner.errors import InventoryError
from runner.labs.base import NodeConfig
from runner.spec.inventory import ERA_ENV, Inventory, KubernetesSpec, Node, Role
from vllmfacts.wording import Era

LAB_LABEL = "gameday.io/lab"  # on the namespace: the mark that it is a lab (the blast-radius guard)
NODE_LABEL = "gameday.io/node"
GROUP_LABEL = "gameday.io/group"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gameday"}
CREATED_BY_ANNOTATION = "gameday.io/created-by"  # on a namespace gameday created (and may delete)
CONTAINER = "vllm"
HF_HOME_DEFAULT = "/root/.cache/huggingface"


def spec_of(inventory: Inventory) -> KubernetesSpec:
    return inventory.lab.kubernetes or KubernetesSpec()


def group_of(inventory: Inventory, node: Node) -> str:
    """The DNS name of a head's or worker's group: its largest inventory group."""
    groups = [g for g in node.groups if g not in ("all", "head", "worker")]
    best = max(groups, key=lambda g: len(inventory.resolve(g)), default="")
    name = best.replace("_", "-").lower()
    if not re.fullmatch(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?", name):
        raise InventoryError(
            f"host {node.name} ({node.role.value}) needs a group whose name can be a Service "
            f"name (its headless Service), not {best!r}",
            file=inventory.path,
            field=f"{node.name}.groups",
            hint="put the group's hosts under a group such as tp_group",
        )
    return name


def is_grouped(node: Node) -> bool:
    """Whether the node is a rank of a tensor-parallel group (a head or a worker)."""
    return node.role is not Role.SERVING


def peer_group(inventory: Inventory, node: Node) -> str | None:
    """The group a serving node shares with other hosts, whose peers address it by name (the
    disaggregated pair and its proxy); None for a server by itself."""
    if node.role is not Role.SERVING:
        return None
    if not any(g != "all" and len(inventory.resolve(g)) > 1 for g in node.groups):
        return None
    return group_of(inventory, node)


def is_stateful(inventory: Inventory, node: Node) -> bool:
    """Whether the node's workload is a StatefulSet (a stable pod name and DNS name under its
    group's headless Service) rather than a Deployment."""
    return is_grouped(node) or peer_group(inventory, node) is not None


def labels(inventory: Inventory, node: str | None = None) -> dict[str, str]:
    out = {LAB_LABEL: inventory.lab.name, **MANAGED_BY}
    if node is not None:
        out |= {"app.kubernetes.io/name": node, NODE_LABEL: node}
    return out


def selector(inventory: Inventory, node: str | None = None) -> str:
    """The label selector of the lab's engine pods (of one node's, when given): the lab's pods
    with a node label (its Prometheus has none)."""
    sel = f"{LAB_LABEL}={inventory.lab.name}"
    return sel + (f",{NODE_LABEL}={node}" if node else f",{NODE_LABEL}")


def namespace(inventory: Inventory) -> dict[str, Any]:
    spec = spec_of(inventory)
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": spec.namespace,
            "labels": {LAB_LABEL: inventory.lab.name},
            "annotations": {CREATED_BY_ANNOTATION: "gameday"},
        },
    }


def headless_service(inventory: Inventory, group: str) -> dict[str, Any]:
    """The group's headless Service: DNS names for its pods, ready or not (an engine binds its
    side channel at its name before it is ready). A tensor-parallel group's port is the
    rendezvous; a group of servers', their HTTP port."""
    spec = spec_of(inventory)
    head = next(
        (n for n in inventory.nodes if n.role is Role.HEAD and group_of(inventory, n) == group),
        None,
    )
    members = [n for n in inventory.nodes if peer_group(inventory, n) == group]
    if head is None and members:
        named = {"name": "http", "port": members[0].port}
    else:
        port = _flag(head.rendered_args(), "--master-port", "29501") if head else "29501"
        named = {"name": "rendezvous", "port": int(port)}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": group, "namespace": spec.namespace, "labels": labels(inventory)},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LAB_LABEL: inventory.lab.name, GROUP_LABEL: group},
            "ports": [{**named, "protocol": "TCP"}],
        },
    }


def _flag(args: list[str], flag: str, default: str) -> str:
    return args[args.index(flag) + 1] if flag in args[:-1] else default


def service(inventory: Inventory) -> dict[str, Any]:
    """The EKS start-failure write-up's Service: named `vllm`, selecting the serving pods,
    port `http`."""
    spec = spec_of(inventory)
    serving = [n for n in inventory.nodes if n.role is Role.SERVING]
    port = serving[0].port if serving else 8000
    target = serving[0].name if serving else "serving"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": spec.service,
            "namespace": spec.namespace,
            "labels": labels(inventory),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {NODE_LABEL: target, LAB_LABEL: inventory.lab.name},
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def baseline_config(inventory: Inventory, node: Node) -> NodeConfig:
    return NodeConfig(
        args=tuple(node.rendered_args()),
        env=dict(node.env),
        service_links=spec_of(inventory).enable_service_links,
    )


def lab_env(inventory: Inventory) -> dict[str, str]:
    """What the lab engine needs beyond the node's own environment. Each only where it is not
    the lab engine's default, so that a default lab's manifests name no lab-only variable; on
    real vLLM they are inert (no vLLM reads a GAMEDAY_ name, and the prefix never trips its
    unknown-variable warning)."""
    lab = inventory.lab
    env = {"GAMEDAY_TIME_SCALE": f"{lab.time_scale:g}"} if lab.time_scale != 1 else {}
    if lab.vllm_version is not Era.V0_19:
        env[ERA_ENV] = lab.vllm_version.value
    return env


def _probe(path: str, period_s: int, failure_threshold: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period_s,
        "failureThreshold": failure_threshold,
    }


def _pod_spec(inventory: Inventory, node: Node, config: NodeConfig | None) -> dict[str, Any]:
    spec = spec_of(inventory)
    cfg = config or baseline_config(inventory, node)
    env = {**cfg.env, **lab_env(inventory)}
    gpus = node.gpu.count if spec.gpu is not None else 0
    requests: dict[str, str] = dict(spec.requests)
    limits: dict[str, str] = dict(spec.limits)
    if spec.gpu is not None and gpus:
        requests[spec.gpu.resource] = str(gpus)
        limits[spec.gpu.resource] = str(gpus)
    pod: dict[str, Any] = {
        # stated, never left to the default (true): the EKS start-failure write-up's scenario 0
        "enableServiceLinks": bool(cfg.service_links),
        "terminationGracePeriodSeconds": spec.termination_grace_s,
        "containers": [
            {
                "name": CONTAINER,
                "image": spec.image,
                "imagePullPolicy": spec.image_pull_policy,
                "command": list(node.program(inventory.lab.engine_command)),
                "args": list(cfg.args),
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "ports": [{"name": "http", "containerPort": node.port, "protocol": "TCP"}],
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": [
                    {"name": "hf-cache", "mountPath": cfg.env.get("HF_HOME", HF_HOME_DEFAULT)},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ],
            }
        ],
        "volumes": [
            {"name": "hf-cache", "emptyDir": {"sizeLimit": spec.hf_cache_size}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}},
        ],
    }
    if node.role is not Role.WORKER:  # a headless worker has no HTTP to probe
        pod["containers"][0]["startupProbe"] = _probe(
            node.health_path, spec.startup_probe.period_s, spec.startup_probe.failure_threshold
        )
        pod["containers"][0]["readinessProbe"] = _probe(
            node.health_path,
            spec.readiness_probe.period_s,
            spec.readiness_probe.failure_threshold,
        )
    # a node that takes no GPU (the disaggregated pair's proxy) is not placed on GPU nodes: it
    # goes where a cluster's other services go, and leaves the GPU nodes' capacity to engines
    if spec.gpu is not None and gpus:
        pod["tolerations"] = [dict(t) for t in spec.gpu.tolerations]
        pod["nodeSelector"] = dict(spec.gpu.node_selector)
    if node.kubernetes_node is not None:
        # the host is one machine: its pod comes back there after every restart, as a process
        # of an inventory of machines does, whatever else the scheduler would score higher
        pod["nodeSelector"] = {
            **pod.get("nodeSelector", {}),
            "kubernetes.io/hostname": node.kubernetes_node,
        }
    return pod


def workload(inventory: Inventory, node: Node, config: NodeConfig | None = None) -> dict[str, Any]:
    """The node's workload with `config` (default: the baseline) as its container's args, env
    and the pod's enableServiceLinks: a Deployment for a single-node server, a StatefulSet for
    a rank of a group or a server its peers address by name."""
    if is_stateful(inventory, node):
        return statefulset(inventory, node, config)
    return deployment(inventory, node, config)


def statefulset(
    inventory: Inventory, node: Node, config: NodeConfig | None = None
) -> dict[str, Any]:
    group = group_of(inventory, node)
    spec = {
        "serviceName": group,
        # all ranks start together: the head is not ready until its workers have joined
        "podManagementPolicy": "Parallel",
    }
    return _workload("StatefulSet", inventory, node, config, spec, {GROUP_LABEL: group})


def deployment(
    inventory: Inventory, node: Node, config: NodeConfig | None = None
) -> dict[str, Any]:
    # one GPU cannot be held by the old and the new pod at once
    spec = {"strategy": {"type": "Recreate"}}
    return _workload("Deployment", inventory, node, config, spec, {})


def _workload(
    kind: str,
    inventory: Inventory,
    node: Node,
    config: NodeConfig | None,
    spec: dict[str, Any],
    extra_labels: dict[str, str],
) -> dict[str, Any]:
    pod_labels = labels(inventory, node.name) | extra_labels
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": node.name,
            "namespace": spec_of(inventory).namespace,
            "labels": pod_labels,
        },
        "spec": {
            "replicas": 1,
            **spec,
            "selector": {"matchLabels": {LAB_LABEL: inventory.lab.name, NODE_LABEL: node.name}},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": _pod_spec(inventory, node, config),
            },
        },
    }


def config_of(deployment_obj: Any, inventory: Inventory) -> NodeConfig:
    """A Deployment (the client's model) back to the node's config: its args, its env without
    the lab's own GAMEDAY_ variables, its pod's enableServiceLinks."""
    pod = deployment_obj.spec.template.spec
    c = next(c for c in pod.containers if c.name == CONTAINER)
    env = {e.name: e.value or "" for e in c.env or [] if not e.name.startswith("GAMEDAY_")}
    links = pod.enable_service_links
    return NodeConfig(
        args=tuple(c.args or ()), env=env, service_links=True if links is None else bool(links)
    )


def groups(inventory: Inventory) -> list[str]:
    """The tensor-parallel groups."""
    return sorted({group_of(inventory, n) for n in inventory.nodes if is_grouped(n)})


def peer_groups(inventory: Inventory) -> list[str]:
    """The groups of servers that address each other by name."""
    return sorted({g for n in inventory.nodes if (g := peer_group(inventory, n)) is not None})


def headless_groups(inventory: Inventory) -> list[str]:
    """Every group with a headless Service of gameday's: the tensor-parallel groups and the
    groups of servers."""
    return sorted({*groups(inventory), *peer_groups(inventory)})


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a ConfigMap's files) as literal blocks, readable as printed."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_all(docs: list[dict[str, Any]]) -> str:
    """The manifests as a YAML stream, as `gameday lab manifests` prints them."""
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False)
