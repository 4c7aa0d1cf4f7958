"""The real control plane's lifecycle (tests/kubereal): it comes up on loopback with owner-only
credentials, the official client reaches it with the kubeconfig it writes, its controllers and
scheduler work, and stopping it leaves none of its processes alive."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import wait_for
from tests.kubereal import build
from tests.kubereal.cluster import ControlPlane


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_up_reachable_owner_only_and_stopped_without_a_trace(tmp_path: Path) -> None:
    binaries = build.cached()
    if binaries is None:
        pytest.skip(f"no real control plane in {build.cache_root()} (`make kube-control-plane`)")
    cp = ControlPlane(binaries, tmp_path / "kube").start()
    try:
        pids, port = cp.pids(), cp.port
        assert len(pids) == 4 and all(_alive(p) for p in pids)
        # each in its own process group, which is what stop() signals
        assert [os.getpgid(p) for p in pids] == pids
        # the directory keeps everything in it from other users; the credentials are 0600 too
        assert _mode(cp.dir) == _mode(cp.dir / "pki") == 0o700
        creds = [*(cp.dir / "pki").iterdir(), *cp.dir.glob("kubeconfig*")]
        assert len(creds) == 9 and {_mode(f) for f in creds} == {0o600}
        api = config.new_client_from_config(str(cp.kubeconfig))
        core = client.CoreV1Api(api)
        v = client.VersionApi(api).get_code()
        assert (v.major, v.minor, v.git_version) == ("1", "20", build.UPSTREAM_VERSION)
        # the controller-manager runs: the default namespace gets its ServiceAccount
        wait_for(lambda: _read_sa(core, "default", "default"), timeout=60)
        apps = client.AppsV1Api(api)
        core.create_namespace({"metadata": {"name": "t"}})
        wait_for(lambda: _read_sa(core, "default", "t"), timeout=60)
        apps.create_namespaced_deployment("t", _deployment())
        # the ReplicaSet controller makes the pod, the scheduler finds no node for it
        pod = wait_for(lambda: core.list_namespaced_pod("t").items, timeout=60)[0]
        cond = wait_for(lambda: _scheduled_condition(core, pod.metadata.name), timeout=60)
        assert (cond.status, cond.reason) == ("False", "Unschedulable")
    finally:
        cp.stop()
    assert [p for p in pids if _alive(p)] == []
    assert not _listening(port)


def _mode(f: Path) -> int:
    return stat.S_IMODE(f.stat().st_mode)


def _read_sa(core: client.CoreV1Api, name: str, ns: str) -> object | None:
    try:
        return core.read_namespaced_service_account(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _scheduled_condition(core: client.CoreV1Api, name: str) -> object | None:
    p = core.read_namespaced_pod(name, "t")
    return next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)


def _deployment() -> dict[str, object]:
    labels = {"app": "a"}
    return {
        "metadata": {"name": "a"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "a", "image": "busybox"}]},
            },
        },
    }
