"""The Kubernetes lab's two backends for the tests, and which one each test ran against.

- `real_cluster`: the real control plane (tests/kubereal: kube-apiserver, controller-manager
  and scheduler v1.20, etcd) with our kubelet (tests/kubereal/kubelet.py). Tests that can run on
  it are marked `kube_real`.
- The stand-in (tests/kubeapi/server.py) stays where a test needs what v1.20 or our kubelet does
  not give; such a test is marked `kube_standin(why)`.

The terminal summary lists the tests that ran under each mark, and why the stand-in's did
(tests/conftest.py). Both write the kubeconfig the inventory names (build/kubeapi/kubeconfig,
context `gameday-testserver`), so one inventory serves both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.kubereal import build
from tests.kubereal.cluster import ControlPlane
from tests.kubereal.kubelet import NODE_PREFIX, Kubelet
from tests.support.cli import ROOT, variant

CONTEXT = "gameday-testserver"
INVENTORY = ROOT / "inventories" / "kube-testserver.yaml"
# each GPU host of the inventory and the GPU node of its own it is pinned to (both backends
# name their nodes NODE_PREFIX + N)
PINS = {
    "        serving:\n": 5,
    "            node1:\n": 1,
    "            node2:\n": 2,
    "            node3:\n": 3,
    "            node4:\n": 4,
    "        prefill:\n": 6,
    "        decode:\n": 7,
}
REAL = "the real API server (v1.20) and our kubelet"


@dataclass
class RealCluster:
    control_plane: ControlPlane
    kubelet: Kubelet
    kubeconfig: Path


def require_binaries() -> build.Binaries:
    """The cached control plane build; skips the test (fails it where GAMEDAY_REQUIRE_KUBE=1,
    as in `make test`, which builds it) when there is none."""
    binaries = build.cached()
    if binaries is None:
        why = f"no real control plane in {build.cache_root()} (`make kube-control-plane` builds it)"
        if os.environ.get("GAMEDAY_REQUIRE_KUBE") == "1":
            pytest.fail(f"the real control plane is required here (GAMEDAY_REQUIRE_KUBE=1): {why}")
        pytest.skip(why)
    return binaries


@contextmanager
def real_cluster(state: Path, kubeconfig: Path, time_scale: float = 100) -> Iterator[RealCluster]:
    """The control plane and our kubelet, with an admin kubeconfig at `kubeconfig`; everything
    of them stopped after."""
    with ControlPlane(require_binaries(), state / "control-plane") as cp:
        token = cp.pki.tokens["system:node:kubelet"]
        with Kubelet(cp.url, cp.pki, token, state / "kubelet", time_scale) as kubelet:
            write_kubeconfig(kubeconfig, cp)
            yield RealCluster(cp, kubelet, kubeconfig)


def write_kubeconfig(path: Path, cp: ControlPlane) -> None:
    """The admin's kubeconfig under the context the test inventories name, owner-only."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": cp.url, "certificate-authority": str(cp.pki.ca)},
            }
        ],
        "users": [{"name": "gameday", "user": {"token": cp.pki.tokens["admin"]}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": "gameday"}}],
        "current-context": CONTEXT,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(doc, f)


def pinned_inventory(tmp_path: Path, kubeconfig: Path, name: str = "kube-pinned.yaml") -> Path:
    """inventories/kube-testserver.yaml with each GPU host pinned to a node of its own
    (gameday_kubernetes_node), as an inventory of machines is, its kubeconfig path absolute.

    stray-gpu-process needs it: its shortcut (restart the group) must not restore while the
    stranger holds the head's GPU, which holds only where the new head returns to that node
    (docs/labs/kubernetes.md 'Pinning a host to a node')."""
    pins = {
        host: f"{host}{' ' * (len(host) - len(host.lstrip()) + 2)}"
        f"gameday_kubernetes_node: {NODE_PREFIX}{i}\n"
        for host, i in PINS.items()
    }
    paths = {"../build/kubeapi/kubeconfig": str(kubeconfig)}
    return variant(INVENTORY, tmp_path, paths | pins, name)
