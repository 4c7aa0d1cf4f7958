"""A stray GPU program on Kubernetes: a bare pod pinned to a node that requests no
`nvidia.com/gpu` but sets `NVIDIA_VISIBLE_DEVICES=all`. The device plugin never sees it (nothing
was requested), and the NVIDIA container runtime hands it every GPU of the node anyway: the
classic way a stranger lands on a serving GPU in a cluster (seeds/001's OmniParser, on EKS).

It is a ChangeKind.PROCESS subject like a program on the other labs: started by creating the
pod, stopped by deleting it, journalled and undone the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from runner.errors import LabError
from runner.inventory import Inventory
from runner.labs.kubernetes import manifests as mf

STRAY_LABEL = "gameday.io/stray"  # on a stray pod: the program's name in the scenario


def pod_name(name: str) -> str:
    """The pod of the program `name` (a scenario's process name, made a DNS label)."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50]
    if not out:
        raise LabError(f"process name {name!r} cannot name a pod")
    return f"stray-{out}"


def selector(inventory: Inventory) -> str:
    return f"{mf.LAB_LABEL}={inventory.lab.name},{STRAY_LABEL}"


def stray_pod(
    inventory: Inventory, name: str, node_name: str, command: Sequence[str]
) -> dict[str, Any]:
    """The stray pod on the Kubernetes node `node_name` (where the target's pod runs)."""
    spec = mf.spec_of(inventory)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name),
            "namespace": spec.namespace,
            "labels": {**mf.labels(inventory), STRAY_LABEL: pod_name(name)},
            "annotations": {"gameday.io/process": name},
        },
        "spec": {
            "nodeName": node_name,  # beside the target: no scheduler, no GPU accounting
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "stray",
                    "image": spec.image,
                    "imagePullPolicy": spec.image_pull_policy,
                    "command": list(command),
                    # the hole: no nvidia.com/gpu request, every GPU through the runtime
                    "env": [
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                    ],
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                }
            ],
        },
    }
    if spec.gpu is not None:
        pod["spec"]["tolerations"] = [dict(t) for t in spec.gpu.tolerations]
    return pod
