"""Bare pods on the stand-in: created through the pods endpoint, pinned by spec.nodeName, their
restartPolicy honoured, never replaced once deleted; and the NVIDIA runtime's hole (a container
that requests no GPU but sets NVIDIA_VISIBLE_DEVICES gets the node's GPU, uncounted)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import pod_exec, wait_for
from tests.kubeapi.server import NODE_PREFIX, Server

pytestmark = pytest.mark.kube_standin(
    "tests the stand-in's own kubelet features (test_kubelet.py has ours)"
)


def pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "app", "image": "busybox", "command": command}
    container |= spec.pop("container", {})
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container], **spec},
    }


@pytest.fixture
def lab(core: client.CoreV1Api) -> client.CoreV1Api:
    core.create_namespace({"metadata": {"name": "lab"}})
    return core


def phase(core: client.CoreV1Api, name: str, want: str) -> Any:
    return wait_for(lambda: (p := core.read_namespaced_pod(name, "lab")).status.phase == want and p)


@pytest.mark.parametrize(
    ("policy", "code", "want_phase", "restarted"),
    [
        ("Never", 3, "Failed", False),
        ("OnFailure", 0, "Succeeded", False),
        ("OnFailure", 3, None, True),
        ("Always", 0, None, True),
    ],
)
def test_restart_policy(
    lab: client.CoreV1Api, policy: str, code: int, want_phase: str | None, restarted: bool
) -> None:
    lab.create_namespaced_pod("lab", pod("job", ["sh", "-c", f"exit {code}"], restartPolicy=policy))
    if restarted:
        p = wait_for(
            lambda: (
                (x := lab.read_namespaced_pod("job", "lab")).status.container_statuses
                and x.status.container_statuses[0].restart_count >= 1
                and x
            )
        )
        assert p.status.container_statuses[0].last_state.terminated.exit_code == code
    else:
        p = phase(lab, "job", want_phase or "")
        cs = p.status.container_statuses[0]
        assert (cs.restart_count, cs.state.terminated.exit_code) == (0, code)


def test_a_deleted_bare_pod_is_gone_and_a_pinned_one_runs_on_its_node(
    lab: client.CoreV1Api,
) -> None:
    node = f"{NODE_PREFIX}3"
    lab.create_namespaced_pod("lab", pod("pinned", ["sleep", "600"], nodeName=node))
    p = phase(lab, "pinned", "Running")
    assert p.spec.node_name == node
    events = lab.list_namespaced_event("lab", field_selector="involvedObject.name=pinned")
    assert "Scheduled" not in [e.reason for e in events.items]  # the scheduler never saw it
    lab.delete_namespaced_pod("pinned", "lab")

    def gone() -> bool:
        try:
            lab.read_namespaced_pod("pinned", "lab")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone)
    assert [x.metadata.name for x in lab.list_namespaced_pod("lab").items] == []


def smi(core: client.CoreV1Api, name: str) -> str:
    command = ["sh", "-c", "echo $GAMEDAY_GPU $GAMEDAY_GPU_COUNT $GAMEDAY_GPU_STATE"]
    return str(pod_exec(core, name, command).read_stdout())


def test_nvidia_visible_devices_without_a_request_gets_the_nodes_gpu(
    server: Server, lab: client.CoreV1Api
) -> None:
    """The stray pod shares the GPU of the engine pinned on the same node; the scheduler, which
    never counts it, still places a GPU pod on that node's one GPU."""
    node = f"{NODE_PREFIX}1"
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    lab.create_namespaced_pod(
        "lab",
        pod(
            "stray",
            ["sleep", "600"],
            nodeName=node,
            container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        ),
    )
    lab.create_namespaced_pod(
        "lab", pod("engine", ["sleep", "600"], nodeName=node, tolerations=tol, container=gpu)
    )
    lab.create_namespaced_pod("lab", pod("plain", ["sleep", "600"], nodeName=node))
    for name in ("stray", "engine", "plain"):
        phase(lab, name, "Running")
    state = server.cluster.state_dir / "gpu" / node
    assert smi(lab, "stray") == f"a10g 1 {state}\n"
    assert smi(lab, "engine") == f"a10g 1 {state}\n"
    assert smi(lab, "plain") == "\n"
    assert server.cluster.gpus_in_use(node) == 1
