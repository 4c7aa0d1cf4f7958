from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.stream import stream

from tests.kubeapi.server import Server
from tests.kubereal import build
from tests.kubereal.cluster import ControlPlane
from tests.kubereal.kubelet import Kubelet


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(0, tmp_path / "kube" / "kubeconfig", time_scale=100).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def real_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The real kube-apiserver, controller-manager and scheduler (v1.20, built from Debian's
    source package by `make kube-control-plane`), one for the session; skipped, saying so, when
    that build is not in the cache: building it takes 6 to 11 minutes cold."""
    binaries = build.cached()
    if binaries is None:
        why = f"no real control plane in {build.cache_root()} (`make kube-control-plane` builds it)"
        if os.environ.get("GAMEDAY_REQUIRE_KUBE") == "1":  # CI: `make test` built it
            pytest.fail(f"the real control plane is required here (GAMEDAY_REQUIRE_KUBE=1): {why}")
        pytest.skip(why)
    with ControlPlane(binaries, tmp_path_factory.mktemp("kubereal")) as cp:
        yield cp


@pytest.fixture
def kubelet(real_control_plane: ControlPlane, tmp_path: Path) -> Iterator[Kubelet]:
    """Our kubelet on the real control plane: five GPU nodes, periods at x100."""
    cp = real_control_plane
    token = cp.pki.tokens["system:node:kubelet"]
    with Kubelet(cp.url, cp.pki, token, tmp_path / "kubelet", time_scale=100) as k:
        yield k


@pytest.fixture
def core(server: Server, tmp_path: Path) -> client.CoreV1Api:
    api = config.new_client_from_config(str(tmp_path / "kube" / "kubeconfig"))
    return client.CoreV1Api(api)


T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s")


def deployment(name: str, command: list[str], **container: Any) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {"name": "app", "image": "busybox", "command": command, **container}
                    ],
                },
            },
        },
    }


def running_pod(core: client.CoreV1Api, ns: str, app: str) -> Any:
    """The app's pod once its container runs."""

    def find() -> Any:
        for p in core.list_namespaced_pod(ns, label_selector=f"app={app}").items:
            cs = p.status.container_statuses or []
            if cs and cs[0].state.running and not p.metadata.deletion_timestamp:
                return p
        return None

    return wait_for(find)


def pod_exec(core: client.CoreV1Api, pod: str, command: list[str], ns: str = "lab") -> Any:
    """`command` run in the pod through the API's exec (the official client's stream), to its
    end: read_stdout(), read_stderr(), returncode."""
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        ns,
        command=command,
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=20)
    return resp
