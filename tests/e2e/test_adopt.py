"""Adopting a deployment the team already runs: a Compose project the test
creates with the Compose CLI (not gameday), with the opt-in label, adopted, faulted, recovered
and left as found; the same project without the label refused with exit 3 and nothing touched;
a Deployment the test creates through the Kubernetes API (tests/kubeapi) adopted, faulted with
set_args and restored to its original spec."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from runner.labs.compose.build import docker_client
from runner.labs.compose.project import compose_command
from tests.kubeapi.server import Server
from tests.support.cli import ROOT, gameday

pytestmark = pytest.mark.e2e
PROJECT = "gameday-adopt-test"
LAB = "team-stack"
SCENARIO = str(ROOT / "scenarios" / "kv-cache-shortage.yaml")
ENGINE_ARGS = [
    "Qwen/Qwen2.5-14B-Instruct-AWQ",
    "--gpu-memory-utilization",
    "0.9",
    "--max-model-len",
    "4096",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
]
COMPOSE_FILE = """\
version: "2.4"
services:
  vllm:
    image: gameday-lab:latest
    restart: always
    stop_grace_period: 3s
    command: [vllm-lab, serve, {args}]
    environment:
      GAMEDAY_TIME_SCALE: "100"
      GAMEDAY_GPU: a10g
      GAMEDAY_GPU_COUNT: "1"
      GAMEDAY_GPU_STATE: /var/lib/gameday/gpu
      HF_HOME: /root/.cache/huggingface
    volumes: [gpu:/var/lib/gameday/gpu]
    ports: ["127.0.0.1:28000:8000"]
    labels:
      team.example/owner: inference
{opt_in}
volumes:
  gpu: {{}}
"""
COMPOSE_INVENTORY = f"""\
all:
  vars:
    gameday_lab:
      name: {LAB}
      kind: compose
      time_scale: 100
      timing_allowance_s: 0.3
      adopt: {{project: {PROJECT}}}
  hosts:
    serving:
      gameday_service: vllm
      gameday_published: 127.0.0.1:28000
"""


def gd(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gameday(*args, timeout=600, env={"GAMEDAY_STATE_DIR": str(state)})


def project(tmp_path: Path, opt_in: str) -> Iterator[Path]:
    """The team's project, up (created by the Compose CLI), and the inventory adopting it."""
    args = ", ".join(json.dumps(a) for a in ENGINE_ARGS)
    (tmp_path / "compose.yaml").write_text(COMPOSE_FILE.format(args=args, opt_in=opt_in))
    cmd = [*compose_command(), "-p", PROJECT, "-f", str(tmp_path / "compose.yaml")]
    subprocess.run([*cmd, "up", "-d"], check=True, capture_output=True, timeout=120)
    inv = tmp_path / "inventory.yaml"
    inv.write_text(COMPOSE_INVENTORY)
    try:
        yield inv
    finally:
        subprocess.run([*cmd, "down", "-v", "-t", "2"], check=True, capture_output=True)


@pytest.fixture
def opted_in(tmp_path: Path, lab_image: str) -> Iterator[Path]:
    yield from project(tmp_path, f'      gameday.io/allow-faults: "{LAB}"')


@pytest.fixture
def not_opted_in(tmp_path: Path, lab_image: str) -> Iterator[Path]:
    yield from project(tmp_path, "")


def containers() -> list[dict[str, Any]]:
    """`docker inspect` of the project's containers."""
    found = docker_client().containers.list(
        all=True, filters={"label": f"com.docker.compose.project={PROJECT}"}
    )
    return [c.attrs for c in found]


def test_an_opted_in_compose_project_is_adopted_faulted_recovered_and_left_as_found(
    opted_in: Path, tmp_path: Path
) -> None:
    (before,) = containers()
    state = tmp_path / "state"
    r = gd(state, "run", SCENARIO, "--lab", str(opted_in), "--reports", str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (scenario,) = json.loads(r.stdout)["scenarios"]
    assert scenario["verdict"] == "passed"
    assert {a["verdict"] for a in scenario["assertions"]} == {"passed"}
    # the failure was read from the previous incarnation's log, across the recreated container
    # (which incarnation depends on how many crash-loop restarts happened before the read)
    title = scenario["evidence"][0]["title"]
    assert re.fullmatch(r"expect: previous logs \(incarnation (\d+)\)", title), title
    assert int(title.split()[-1].rstrip(")")) >= 2  # the first ran the baseline
    (after,) = containers()
    assert after["Id"] != before["Id"]  # recreated with the fault, then with the baseline
    assert after["Name"] == before["Name"] == f"/{PROJECT}_vllm_1"
    for key in ("Cmd", "Env", "Labels", "Image", "Entrypoint", "ExposedPorts"):
        assert after["Config"][key] == before["Config"][key], key
    assert after["Config"]["Cmd"] == ["vllm-lab", "serve", *ENGINE_ARGS]
    assert after["HostConfig"]["PortBindings"] == before["HostConfig"]["PortBindings"]
    assert after["HostConfig"]["Binds"] == before["HostConfig"]["Binds"]
    assert after["HostConfig"]["RestartPolicy"] == {"Name": "always", "MaximumRetryCount": 0}
    assert list(after["NetworkSettings"]["Networks"]) == [f"{PROJECT}_default"]
    assert after["NetworkSettings"]["Networks"][f"{PROJECT}_default"]["Aliases"][0] == "vllm"
    assert after["State"]["Running"] is True
    # the run adopted it and let go of it, still running: no record of it is left
    assert sorted(p.name for p in (state / LAB).iterdir()) == ["journal"]


def test_after_a_crash_cleanup_returns_the_containers_to_the_saved_baseline(
    opted_in: Path, tmp_path: Path
) -> None:
    (before,) = containers()
    state = tmp_path / "state"
    log = tmp_path / "run.log"
    argv = ["run", SCENARIO, "--lab", str(opted_in), "--reports", str(tmp_path)]
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", *argv],
            cwd=ROOT,
            env=os.environ | {"GAMEDAY_STATE_DIR": str(state)},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        deadline = time.monotonic() + 120
        while "expect: waiting for the failure" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    (faulted,) = containers()
    assert "16384" in faulted["Config"]["Cmd"]  # killed with the fault in place
    r = gd(state, "cleanup", "--lab", str(opted_in))
    assert r.returncode == 0, r.stdout + r.stderr
    (after,) = containers()
    for key in ("Cmd", "Env", "Labels", "Image"):
        assert after["Config"][key] == before["Config"][key], key
    assert after["State"]["Running"] is True
    down = gd(state, "lab", "down", "--lab", str(opted_in))
    assert down.returncode == 0, down.stderr
    assert f"lab '{LAB}' let go of compose project '{PROJECT}': it is still running" in down.stderr
    assert not (state / LAB / "adopted.json").exists()
    assert containers()[0]["Id"] == after["Id"]


def test_a_project_without_the_opt_in_label_is_refused_and_untouched(
    not_opted_in: Path, tmp_path: Path
) -> None:
    (before,) = containers()
    state = tmp_path / "state"
    for args in (
        ("lab", "up", "--lab", str(not_opted_in)),
        ("run", SCENARIO, "--lab", str(not_opted_in), "--reports", str(tmp_path)),
    ):
        r = gd(state, *args)
        assert r.returncode == 3, r.stdout + r.stderr
        assert (
            f"compose project '{PROJECT}' has not opted in to faults from lab '{LAB}': "
            f'container(s) {PROJECT}_vllm_1 lack the label gameday.io/allow-faults: "{LAB}"; '
            "nothing was touched"
        ) in r.stderr
        assert f'    labels:\n      gameday.io/allow-faults: "{LAB}"\n' in r.stderr
        assert "Traceback" not in r.stderr
    (after,) = containers()
    assert after["Id"] == before["Id"]
    assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
    assert after["RestartCount"] == before["RestartCount"] == 0
    assert after["Config"] == before["Config"]
    assert not (state / LAB / "adopted.json").exists()


# ---- Kubernetes: a Deployment the test creates through the API --------------------------------

KUBE_INVENTORY = """\
all:
  vars:
    gameday_lab:
      name: {lab}
      kind: kubernetes
      time_scale: 100
      timing_allowance_s: 0.3
      kubernetes: {{kubeconfig: {kubeconfig}, context: gameday-testserver, namespace: team-ml}}
      adopt: {{deployment: team-vllm}}
  hosts:
    serving: {{gameday_port: 8000}}
"""


def team_deployment() -> dict[str, Any]:
    labels = {"app": "team-vllm"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "team-vllm", "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "enableServiceLinks": False,
                    "tolerations": [
                        {
                            "key": "nvidia.com/gpu",
                            "operator": "Equal",
                            "value": "true",
                            "effect": "NoSchedule",
                        }
                    ],
                    "containers": [
                        {
                            "name": "engine",
                            "image": "gameday-lab:latest",
                            "command": ["vllm-lab", "serve"],
                            "args": ENGINE_ARGS,
                            "env": [
                                {"name": "GAMEDAY_TIME_SCALE", "value": "100"},
                                {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                            ],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "resources": {
                                "requests": {"nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": "http"},
                                "periodSeconds": 10,
                            },
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[Path, Any, Any]]:
    kubeconfig = tmp_path / "kubeapi" / "kubeconfig"
    srv = Server(0, kubeconfig, time_scale=100).start()
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield kubeconfig, client.CoreV1Api(api), client.AppsV1Api(api)
    finally:
        srv.stop()


def kube_inventory(tmp_path: Path, kubeconfig: Path, lab: str) -> Path:
    inv = tmp_path / f"{lab}.yaml"
    inv.write_text(KUBE_INVENTORY.format(lab=lab, kubeconfig=kubeconfig))
    return inv


def test_a_deployment_in_a_labelled_namespace_is_adopted_faulted_and_restored(
    kube: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    kubeconfig, core, apps = kube
    core.create_namespace({"metadata": {"name": "team-ml", "labels": {"gameday.io/lab": LAB}}})
    apps.create_namespaced_deployment("team-ml", team_deployment())
    original = copy.deepcopy(apps.read_namespaced_deployment("team-vllm", "team-ml").spec)
    inv = kube_inventory(tmp_path, kubeconfig, LAB)
    state = tmp_path / "state"
    r = gd(state, "run", SCENARIO, "--lab", str(inv), "--reports", str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (scenario,) = json.loads(r.stdout)["scenarios"]
    assert scenario["verdict"] == "passed"
    d = apps.read_namespaced_deployment("team-vllm", "team-ml")
    assert d.spec.template == original.template  # args, env (the fieldRef too), probes
    assert d.spec.template.spec.containers[0].args == ENGINE_ARGS
    assert d.metadata.generation == 3  # created, faulted, put back: no other write
    # nothing created, nothing deleted: the team's Deployment and its pod only
    assert [x.metadata.name for x in apps.list_namespaced_deployment("team-ml").items] == [
        "team-vllm"
    ]
    assert core.list_namespaced_service("team-ml").items == []
    pods = core.list_namespaced_pod("team-ml").items
    assert [p.metadata.labels["app"] for p in pods] == ["team-vllm"]
    assert not (state / LAB / "adopted.json").exists()


def test_a_namespace_without_the_lab_label_is_refused(
    kube: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    kubeconfig, core, apps = kube
    core.create_namespace({"metadata": {"name": "team-ml"}})
    apps.create_namespaced_deployment("team-ml", team_deployment())
    before = apps.read_namespaced_deployment("team-vllm", "team-ml")
    r = gd(tmp_path / "state", "lab", "up", "--lab", str(kube_inventory(tmp_path, kubeconfig, LAB)))
    assert r.returncode == 3, r.stdout + r.stderr
    assert (
        f"namespace 'team-ml' has not opted in to faults from lab '{LAB}' (label "
        f"gameday.io/lab={LAB} is missing)"
    ) in r.stderr
    assert f"hint: kubectl label namespace team-ml gameday.io/lab={LAB}" in r.stderr
    after = apps.read_namespaced_deployment("team-vllm", "team-ml")
    assert after.spec == before.spec  # (its status moves as its pod becomes ready)
    assert after.metadata.generation == 1
