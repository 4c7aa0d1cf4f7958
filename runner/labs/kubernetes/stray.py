"""A stray GPU program on Kubernetes: a bare pod pinned to a node that requests no
`nvidia.com/gpu` but sets `NVIDIA_VISIBLE_DEVICES=all`. The device plugin never sees it (nothing
was requested), and the NVIDIA container runtime hands it every GPU of the node anyway: the
classic way a stranger lands on a serving GPU in a cluster (the stray GPU process write-up's
OmniParser, on EKS).

It is a ChangeKind.PROCESS subject like a program on the other labs: started by creating the
pod, stopped by deleting it, journalled and undone the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from runner.errors import LabError
from runner.labs.kubernetes import manifests as mf
from runner.spec.inventory import Inventory

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


TARGET_NODE = "<the node of the target's pod>"

# On a real GPU, in vLLM's image (torch, no vllm-lab): a process that holds `argv[1]` MiB of the
# node's GPU and idles, as the stray GPU process write-up's OmniParser did. gameday's own text,
# never a scenario's.
TORCH_HOLDER = """\
import sys, time, torch
held = torch.empty(int(sys.argv[1]) * 2**20, dtype=torch.uint8, device="cuda")
print("holding", sys.argv[1], "MiB on", torch.cuda.get_device_name(0), flush=True)
while True:
    time.sleep(3600)
"""


def command_for(inventory: Inventory, lab_command: Sequence[str]) -> tuple[str, ...]:
    """The stray program's container command: the lab engine image's `vllm-lab stray` as the
    other labs run it; in vLLM's image, a torch process holding as much GPU memory."""
    if inventory.lab.engine_command[:1] == ("vllm-lab",):
        return tuple(lab_command)
    mib = "1417"
    if "--mib" in lab_command:
        mib = lab_command[list(lab_command).index("--mib") + 1]
    return ("python3", "-c", TORCH_HOLDER, mib)


def scenario_manifests(inventory: Inventory) -> list[dict[str, Any]]:
    """What scenarios create on this lab, one of each program they may start (for reading and
    validation; `nodeName` is filled in when a scenario runs)."""
    from runner.spec.actions import PROGRAMS, Program

    # as the catalogue's scenarios name them; a GPU XID is no pod (gpu-xid-error is not on
    # this lab: its kernel log and device are the node's, outside every pod)
    names = {Program.STRAY_GPU_PROCESS: "omniparser"}
    return [
        stray_pod(inventory, name, TARGET_NODE, command_for(inventory, PROGRAMS[p]))
        for p, name in names.items()
    ]
