"""Exec into the stand-in's pods through the official client's stream API, and the pod's own
namespaces that exec enters (PID 1, hostname, /proc)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import deployment, pod_exec, running_pod, wait_for

pytestmark = pytest.mark.kube_standin(
    "tests the stand-in's own kubelet features (test_kubelet.py has ours)"
)


@pytest.fixture
def lab(core: client.CoreV1Api) -> client.CoreV1Api:
    core.create_namespace({"metadata": {"name": "lab"}})
    return core


def test_exec_streams_stdout_stderr_and_the_exit_code(lab: client.CoreV1Api) -> None:
    apps = client.AppsV1Api(lab.api_client)
    apps.create_namespaced_deployment("lab", deployment("box", ["sleep", "600"]))
    pod = running_pod(lab, "lab", "box").metadata.name
    ok = pod_exec(lab, pod, ["sh", "-c", "echo out; hostname"])
    assert (ok.read_stdout(), ok.read_stderr(), ok.returncode) == (f"out\n{pod}\n", "", 0)
    bad = pod_exec(lab, pod, ["sh", "-c", "echo err >&2; exit 3"])
    assert (bad.read_stdout(), bad.read_stderr(), bad.returncode) == ("", "err\n", 3)
    status = json.loads(bad.read_channel(3) or "null") if bad.peek_channel(3) else None
    assert status is None  # returncode consumed the error channel
    missing = pod_exec(lab, pod, ["no-such-program", "x"])
    assert missing.read_stderr() == (
        "OCI runtime exec failed: exec failed: unable to start container process: "
        'exec: "no-such-program": executable file not found in $PATH: unknown\n'
    )
    assert missing.returncode == 126


def test_exec_status_is_the_v4_status_json(lab: client.CoreV1Api) -> None:
    apps = client.AppsV1Api(lab.api_client)
    apps.create_namespaced_deployment("lab", deployment("box", ["sleep", "600"]))
    pod = running_pod(lab, "lab", "box").metadata.name
    resp = pod_exec(lab, pod, ["sh", "-c", "exit 7"])
    # the handshake's answer, as every client exposes it (WSClient.subprotocol is from 30 on)
    headers = {k.lower(): v for k, v in resp.sock.getheaders().items()}
    assert headers["sec-websocket-protocol"] == "v4.channel.k8s.io"
    assert json.loads(resp.read_channel(3)) == {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: error executing command "
        "[sh -c exit 7], exit code 7",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "7"}]},
    }
    ok = pod_exec(lab, pod, ["true"])
    assert json.loads(ok.read_channel(3)) == {"metadata": {}, "status": "Success"}


def test_the_container_is_pid_1_of_its_own_namespaces(lab: client.CoreV1Api) -> None:
    """`pkill --signal KILL --parent 1` through exec kills PID 1's child only, as in a pod; the
    pod's /proc shows its own processes; its hostname is its name."""
    apps = client.AppsV1Api(lab.api_client)
    apps.create_namespaced_deployment(
        # the pause before exiting lets pkill finish: PID 1's exit kills what is left in the pod
        "lab",
        deployment("box", ["sh", "-c", "sleep 600 & wait; sleep 5; exit 42"]),
    )
    pod = running_pod(lab, "lab", "box")

    def processes() -> list[list[str]] | None:
        # the pod is Running once PID 1 runs: its shell may not have started `sleep` yet
        ps = pod_exec(lab, pod.metadata.name, ["ps", "-e", "-o", "pid=,ppid=,comm="])
        rows = [line.split() for line in ps.read_stdout().splitlines()]
        rows = [r for r in rows if r[2] != "ps"]
        return rows if len(rows) > 1 else None

    assert wait_for(processes) == [["1", "0", "sh"], ["2", "1", "sleep"]]
    kill = pod_exec(lab, pod.metadata.name, ["pkill", "--signal", "KILL", "--parent", "1"])
    assert kill.returncode == 0

    def terminated() -> Any:
        p = lab.read_namespaced_pod(pod.metadata.name, "lab")
        cs = p.status.container_statuses[0]
        term = cs.last_state.terminated or cs.state.terminated
        return term

    assert wait_for(terminated).exit_code == 42


def test_exec_into_a_pod_that_is_not_running_is_refused(lab: client.CoreV1Api) -> None:
    lab.create_namespaced_pod(
        "lab",
        {
            "metadata": {"name": "wants-gpus"},
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox",
                        "command": ["sleep", "600"],
                        "resources": {"limits": {"nvidia.com/gpu": "9"}},
                    }
                ],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
        },
    )
    with pytest.raises(ApiException) as err:
        pod_exec(lab, "wants-gpus", ["true"])
    assert err.value.status == 0 and "400" in str(err.value.reason)
    with pytest.raises(ApiException) as missing:
        pod_exec(lab, "nobody", ["true"])
    assert "404" in str(missing.value.reason)
