"""Our kubelet (tests/kubereal/kubelet.py) on the real control plane: its nodes are Ready with
GPUs, the real controllers' and scheduler's pods run as processes with the Service-link
variables, their status, logs (current and previous) and exec go through the real API server,
a crashing container restarts on CrashLoopBackOff's schedule, and a deleted pod is finished."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import deployment, pod_exec, running_pod, wait_for
from tests.kubereal.cluster import ControlPlane
from tests.kubereal.kubelet import Kubelet

GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture
def api(real_control_plane: ControlPlane, kubelet: Kubelet) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(str(real_control_plane.kubeconfig))
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "lab"}})
    # the ServiceAccount admission controller takes no pod before the default account's token
    wait_for(lambda: _token_ready(core, "lab"), timeout=60)
    yield api
    core.delete_namespace("lab")
    wait_for(lambda: _gone(core), timeout=120)


def _token_ready(core: client.CoreV1Api, ns: str) -> bool:
    try:
        return bool(core.read_namespaced_service_account("default", ns).secrets)
    except ApiException:
        return False


def _gone(core: client.CoreV1Api) -> bool:
    return "lab" not in [n.metadata.name for n in core.list_namespace().items]


def test_nodes_are_ready_with_a_gpu_each_and_a_lease(
    real_control_plane: ControlPlane, kubelet: Kubelet
) -> None:
    api = config.new_client_from_config(str(real_control_plane.kubeconfig))
    core = client.CoreV1Api(api)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert sorted(nodes) == sorted(kubelet.nodes)
    for name, n in nodes.items():
        gpus = "1" if name in kubelet.gpu_nodes else "0"
        assert n.status.capacity["nvidia.com/gpu"] == gpus
        ready = next(c for c in n.status.conditions if c.type == "Ready")
        assert ready.status == "True"
        assert n.status.daemon_endpoints.kubelet_endpoint.port == kubelet.port
        assert n.status.addresses[0].address.startswith("127.0.89.")
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, "kube-node-lease")
        assert lease.spec.holder_identity == name


def test_a_pod_runs_with_service_links_logs_and_exec_through_the_api_server(
    api: client.ApiClient,
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_service(
        "lab", {"metadata": {"name": "vllm"}, "spec": {"ports": [{"port": 8000}]}}
    )
    svc_ip = core.read_namespaced_service("vllm", "lab").spec.cluster_ip
    spec = deployment("box", ["sh", "-c", "echo hello; echo $VLLM_PORT; sleep 600"])
    spec["spec"]["template"]["spec"]["tolerations"] = GPU_TOLERATION
    container = spec["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    apps.create_namespaced_deployment("lab", spec)
    pod = running_pod(core, "lab", "box")
    name = pod.metadata.name
    assert pod.status.pod_ip.startswith("127.0.90.")
    assert pod.status.host_ip.startswith("127.0.89.")
    assert pod.spec.node_name.startswith("gameday-testserver-gpu-")
    ready = wait_for(lambda: _ready(core, name), timeout=30)
    assert ready
    log = wait_for(lambda: core.read_namespaced_pod_log(name, "lab"), timeout=30)
    assert log == f"hello\ntcp://{svc_ip}:8000\n"
    assert core.read_namespaced_pod_log(name, "lab", tail_lines=1) == f"tcp://{svc_ip}:8000\n"
    stamped = core.read_namespaced_pod_log(name, "lab", timestamps=True)
    assert stamped.split(" ", 1)[0].endswith("Z")
    with pytest.raises(ApiException) as no_previous:
        core.read_namespaced_pod_log(name, "lab", previous=True)
    assert no_previous.value.status == 400
    status = json.loads(no_previous.value.body)
    assert status["reason"] == "BadRequest"
    assert status["message"] == f'previous terminated container "app" in pod "{name}" not found'
    ok = pod_exec(core, name, ["sh", "-c", "echo out; hostname; echo $VLLM_SERVICE_HOST"])
    assert (ok.read_stdout(), ok.returncode) == (f"out\n{name}\n{svc_ip}\n", 0)
    bad = pod_exec(core, name, ["sh", "-c", "echo err >&2; exit 3"])
    assert (bad.read_stderr(), bad.returncode) == ("err\n", 3)
    reasons = {e.reason for e in core.list_namespaced_event("lab").items}
    assert {"Scheduled", "Pulled", "Created", "Started"} <= reasons


def _ready(core: client.CoreV1Api, name: str) -> bool:
    p = core.read_namespaced_pod(name, "lab")
    return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


def test_a_crashing_container_backs_off_and_keeps_its_previous_log(
    api: client.ApiClient,
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    apps.create_namespaced_deployment("lab", deployment("crash", ["sh", "-c", "echo bye; exit 2"]))

    def backing_off() -> Any:
        for p in core.list_namespaced_pod("lab", label_selector="app=crash").items:
            cs = (p.status.container_statuses or [None])[0]
            if cs and cs.restart_count >= 2 and cs.state.waiting:
                return p
        return None

    pod = wait_for(backing_off, timeout=60)
    cs = pod.status.container_statuses[0]
    assert cs.state.waiting.reason == "CrashLoopBackOff"
    assert cs.last_state.terminated.exit_code == 2
    assert core.read_namespaced_pod_log(pod.metadata.name, "lab", previous=True) == "bye\n"
    events = core.list_namespaced_event("lab").items
    backoff = [e for e in events if e.reason == "BackOff"]
    assert backoff and backoff[0].type == "Warning"


def test_a_deleted_pod_is_stopped_within_its_grace_period_and_goes(
    api: client.ApiClient, kubelet: Kubelet
) -> None:
    core = client.CoreV1Api(api)
    body = {
        "metadata": {"name": "solo"},
        "spec": {
            "terminationGracePeriodSeconds": 200,  # 2 s at x100
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "command": ["sh", "-c", "trap '' TERM; sleep 600"],
                }
            ],
        },
    }
    core.create_namespaced_pod("lab", body)
    pod = running_pod_named(core, "solo")
    rt = kubelet.runtimes[pod.metadata.uid]
    proc = rt.containers[-1].proc
    t0 = time.monotonic()
    core.delete_namespaced_pod("solo", "lab")
    assert core.read_namespaced_pod("solo", "lab").metadata.deletion_timestamp
    wait_for(lambda: _pod_gone(core, "solo"), timeout=30)
    took = time.monotonic() - t0
    assert proc.poll() is not None  # killed once the grace period ran out
    assert 1.5 < took < 15, took
    reasons = [e.reason for e in core.list_namespaced_event("lab").items]
    assert "Killing" in reasons


def running_pod_named(core: client.CoreV1Api, name: str) -> Any:
    def find() -> Any:
        p = core.read_namespaced_pod(name, "lab")
        cs = p.status.container_statuses or []
        return p if cs and cs[0].state.running else None

    return wait_for(find, timeout=60)


def _pod_gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, "lab")
    except ApiException as exc:
        return exc.status == 404
    return False
