"""Instances of a Kubernetes lab (workshop seats, `gameday run --parallel`): instance k (1..N-1;
0 is the inventory as written) is the same lab in a namespace of its own, `<namespace>-s<k>`,
which the driver creates and labels with the instance's name `<name>-p<k>` as it labels its own
namespace, and the runner's alert receiver (`monitoring.receiver_listen`, when given) on that
port + k. That is how a workshop outgrows one machine: the seats are namespaces of one cluster.
The instance's inventory is written out beside its state (a relative kubeconfig made absolute),
so that every command given that file reaches the same seat."""

from __future__ import annotations

from pathlib import Path

import yaml

from runner.errors import InputError
from runner.fsutil import write_private
from runner.labs.common.helpers import state_root
from runner.spec.inventory import Inventory, KubernetesSpec
from runner.spec.inventory_load import load_inventory

MAX_NAMESPACE = 63  # a namespace is a DNS label


def namespace_of(spec: KubernetesSpec, k: int) -> str:
    return f"{spec.namespace}-s{k}"


def check_instances(inventory: Inventory, n: int) -> None:
    """Refuse an adopted deployment (gameday runs one copy of what a team deployed, never more)
    and namespaces that would outgrow a DNS label."""
    spec = inventory.lab.kubernetes or KubernetesSpec()
    if inventory.lab.adopt is not None:
        raise InputError(
            f"lab {inventory.lab.name!r} adopts a deployment: it runs one instance only",
            file=inventory.path,
            field="gameday_lab.adopt",
            hint="use an inventory whose lab gameday creates (inventories/eks.yaml)",
        )
    longest = namespace_of(spec, max(n - 1, 1))
    if len(longest) > MAX_NAMESPACE:
        raise InputError(
            f"instance namespace {longest!r} is longer than {MAX_NAMESPACE} characters",
            file=inventory.path,
            field="gameday_lab.kubernetes.namespace",
            hint="use a shorter namespace",
        )


def instance(inventory: Inventory, k: int) -> Inventory:
    """Instance k >= 1 of the Kubernetes lab, written to `<its state dir>/inventory.yaml`."""
    spec = inventory.lab.kubernetes or KubernetesSpec()
    data = yaml.safe_load(inventory.path.read_text())
    lab = data["all"]["vars"]["gameday_lab"]
    lab["name"] = f"{inventory.lab.name}-p{k}"
    if inventory.lab.state_dir:
        lab["state_dir"] = f"{inventory.lab.state_dir}-p{k}"
    kube = lab.setdefault("kubernetes", {})
    kube["namespace"] = namespace_of(spec, k)
    mon = lab.get("monitoring")
    if isinstance(mon, dict) and mon.get("receiver_listen"):
        # every instance's Alertmanager delivers to the runner: each to a receiver of its own
        host, _, port = str(mon["receiver_listen"]).rpartition(":")
        mon["receiver_listen"] = f"{host}:{int(port) + k}"
    if spec.kubeconfig:
        kube["kubeconfig"] = str((inventory.path.parent / spec.kubeconfig).resolve())
    state = Path(lab.get("state_dir") or state_root() / lab["name"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / "inventory.yaml"
    write_private(  # the nodes' environments are in it: owner-only
        path,
        f"# instance {k} of {inventory.path} in namespace {kube['namespace']} (written by "
        "gameday)\n" + yaml.safe_dump(data, sort_keys=False),
    )
    return load_inventory(path)
