"""The real control plane's lifecycle (tests/kubereal): it comes up on loopback with owner-only
credentials, the official client reaches it with the kubeconfig it writes, its controllers and
scheduler work, and stopping it leaves none of its processes alive."""

from __future__ import annotations

import datetime
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import wait_for
from tests.kubereal import build
from tests.kubereal.cluster import ControlPlane


def _alive(pid: int) -> bool:
    """Running: an exited process waiting to be reaped (by whichever init adopted it) is not."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


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
        assert len(creds) == 12 and {_mode(f) for f in creds} == {0o600}
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
        cond = wait_for(lambda: _pod_condition(core, pod.metadata.name, "t"), timeout=60)
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


def _pod_condition(core: client.CoreV1Api, name: str, ns: str) -> Any:
    p = core.read_namespaced_pod(name, ns)
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


def test_the_real_scheduler_counts_gpus_on_a_registered_node(
    real_control_plane: ControlPlane,
) -> None:
    """A Node registered and reported Ready the way a kubelet does (its capacity carries
    `nvidia.com/gpu`, a string quantity: the official client refuses an integer in a dict body):
    one GPU pod is bound to it, the second stays Pending for want of a GPU until the first goes."""
    api = config.new_client_from_config(str(real_control_plane.kubeconfig))
    core = client.CoreV1Api(api)
    node = "gpu-node-0"
    core.create_node({"metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}}})
    try:
        _report_ready(core, node)
        core.create_namespace({"metadata": {"name": "gpus"}})
        wait_for(lambda: _read_sa(core, "default", "gpus"), timeout=60)
        for name in ("a", "b"):
            wait_for(lambda n=name: _create_gpu_pod(core, n), timeout=60)
        bound = wait_for(lambda: _bound(core, node), timeout=60)
        assert len(bound) == 1
        waiting = "b" if bound == ["a"] else "a"
        # until the node lifecycle controller lifts the not-ready taint, that is the reason given
        cond = wait_for(lambda: _no_gpu_left(core, waiting), timeout=60)
        assert (cond.status, cond.reason) == ("False", "Unschedulable")
        _report_ready(core, node)  # the heartbeat a kubelet posts every 10 s
        core.delete_namespaced_pod(bound[0], "gpus", grace_period_seconds=0)
        assert wait_for(lambda: _bound(core, node) == [waiting], timeout=60)
    finally:
        core.delete_node(node)
        core.delete_namespace("gpus")


def _report_ready(core: client.CoreV1Api, node: str) -> None:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    quantities = {"cpu": "4", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "1"}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    core.patch_node_status(
        node,
        {"status": {"capacity": quantities, "allocatable": quantities, "conditions": [ready]}},
    )


def _create_gpu_pod(core: client.CoreV1Api, name: str) -> bool:
    gpu = {"nvidia.com/gpu": "1"}
    body = {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": gpu, "requests": gpu}}
            ]
        },
    }
    try:
        core.create_namespaced_pod("gpus", body)
    except ApiException as e:
        # the ServiceAccount admission refuses pods until the token controller made the
        # account's token Secret: 403 "no API token found", or, once it has waited for the
        # token itself, 500 ServerTimeout "No API token found ... retry after the token is
        # automatically created"
        if e.status in (403, 500) and "api token found" in (e.body or "").lower():
            return False
        raise
    return True


def _no_gpu_left(core: client.CoreV1Api, name: str) -> Any:
    cond = _pod_condition(core, name, "gpus")
    return cond if cond and "Insufficient nvidia.com/gpu" in (cond.message or "") else None


def _bound(core: client.CoreV1Api, node: str) -> list[str]:
    pods = core.list_namespaced_pod("gpus", field_selector=f"spec.nodeName={node}").items
    return sorted(p.metadata.name for p in pods)


def test_its_processes_die_with_the_process_that_started_them(tmp_path: Path) -> None:
    """A test process killed outright (no stop(), no finally) leaves no component running: each
    is started with the kernel's parent-death signal."""
    if build.cached() is None:
        pytest.skip(f"no real control plane in {build.cache_root()} (`make kube-control-plane`)")
    up = subprocess.Popen(
        [sys.executable, "-m", "tests.kubereal", "up", "--dir", str(tmp_path / "kube")],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert up.stderr is not None
        line = up.stderr.readline()
        pids = [int(p) for p in re.findall(r"\d+", line.split("pids", 1)[1])]
        assert len(pids) == 4 and all(_alive(p) for p in pids), line
    finally:
        up.kill()
        up.wait()
    assert wait_for(lambda: not [p for p in pids if _alive(p)], timeout=10)
