"""Adopting a deployment the team already runs: a Compose project the test
creates with the Compose CLI (not gameday), with the opt-in label, adopted, faulted, recovered
and left as found, its anonymous volume with it; the same project without the label refused with
exit 3 and nothing touched; a Deployment the test creates through the Kubernetes API (the real
control plane v1.20 with our kubelet) adopted, faulted with set_args and restored to its
original spec; a deployment the team changed after the adoption never overwritten with the old
baseline, and re-adopted on request; a killed runner's fault lease running out and
`cleanup --expired` putting the deployment back; a fault written while something else wrote the
Deployment (a real 409) made again on what it holds now, or refused where the team changed the
engine container meanwhile."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from runner.errors import LabError
from runner.labs import open_lab
from runner.labs.compose.build import docker_client
from runner.labs.compose.project import compose_command
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, gameday
from tests.support.kubecluster import real_cluster

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
    volumes: [gpu:/var/lib/gameday/gpu, /data]
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
        # a volume a recreated container mounts by name is no longer removed with it (as after
        # Compose's own recreate): the test removes what its containers held
        held = [m["Name"] for c in containers() for m in c["Mounts"] if m["Type"] == "volume"]
        subprocess.run([*cmd, "down", "-v", "-t", "2"], check=True, capture_output=True)
        for name in held:
            with contextlib.suppress(Exception):
                docker_client().volumes.get(name).remove(force=True)


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


def anonymous_volume(attrs: dict[str, Any], dest: str = "/data") -> str:
    (name,) = [m["Name"] for m in attrs["Mounts"] if m["Destination"] == dest]
    return str(name)


def exec_in(container_id: str, *cmd: str) -> str:
    code, out = docker_client().containers.get(container_id).exec_run(list(cmd))
    assert code == 0, out
    return str(out.decode())


def test_an_opted_in_compose_project_is_adopted_faulted_recovered_and_left_as_found(
    opted_in: Path, tmp_path: Path
) -> None:
    (before,) = containers()
    exec_in(before["Id"], "sh", "-c", "echo kept > /data/marker")
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
    # recreated twice, it kept its anonymous volume (`- /data`), contents and all
    assert anonymous_volume(after) == anonymous_volume(before)
    assert exec_in(after["Id"], "cat", "/data/marker") == "kept\n"
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
    lease = json.loads((state / LAB / "lease.json").read_text())  # recorded with the fault
    assert 800 < (datetime.fromisoformat(lease["expires"]) - datetime.now(UTC)).seconds <= 900
    r = gd(state, "cleanup", "--expired", "--lab", str(opted_in))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the fault lease holds until" in r.stderr  # (900 s by default): cron waits
    assert containers()[0]["Id"] == faulted["Id"]
    r = gd(state, "cleanup", "--lab", str(opted_in))
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (state / LAB / "lease.json").exists()
    (after,) = containers()
    for key in ("Cmd", "Env", "Labels", "Image"):
        assert after["Config"][key] == before["Config"][key], key
    assert after["State"]["Running"] is True
    down = gd(state, "lab", "down", "--lab", str(opted_in))
    assert down.returncode == 0, down.stderr
    assert f"lab '{LAB}' let go of compose project '{PROJECT}': it is still running" in down.stderr
    assert not (state / LAB / "adopted.json").exists()
    assert containers()[0]["Id"] == after["Id"]


def test_a_project_the_team_redeployed_is_refused_with_an_offer_and_let_go_untouched(
    opted_in: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    up = gd(state, "lab", "up", "--lab", str(opted_in))
    assert up.returncode == 0, up.stdout + up.stderr
    compose = tmp_path / "compose.yaml"  # the team's new release: another context length
    compose.write_text(compose.read_text().replace('"4096"', '"8192"'))
    cmd = [*compose_command(), "-p", PROJECT, "-f", str(compose)]
    subprocess.run([*cmd, "up", "-d"], check=True, capture_output=True, timeout=120)
    (deployed,) = containers()
    assert "8192" in deployed["Config"]["Cmd"]
    r = gd(state, "run", SCENARIO, "--lab", str(opted_in), "--reports", str(tmp_path))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "serving changed since gameday adopted it" in r.stderr
    assert f"gameday lab up --lab {opted_in} --readopt" in r.stderr
    down = gd(state, "lab", "down", "--lab", str(opted_in))
    assert down.returncode == 0, down.stdout + down.stderr
    (after,) = containers()
    assert after["Id"] == deployed["Id"]  # never recreated with the old baseline
    assert not (state / LAB / "adopted.json").exists()


def test_a_recreated_container_keeps_its_docker_run_v_volume(lab_image: str) -> None:
    """`docker run -v /data`: the volume the container made for itself is the new one's."""
    from runner.labs.compose.recreate import recreate

    docker = docker_client()
    created = docker.api.create_container(
        lab_image, ["sleep", "300"], volumes=["/data"], name="gameday-recreate-test"
    )
    old = docker.containers.get(created["Id"])
    volume = ""
    new = None
    try:
        old.start()
        old.reload()
        exec_in(old.id, "sh", "-c", "echo kept > /data/marker")
        volume = anonymous_volume(old.attrs)
        new = recreate(docker, old, ["sleep", "301"], old.attrs["Config"]["Env"], 1)
        assert new.attrs["Config"]["Cmd"] == ["sleep", "301"]
        assert anonymous_volume(new.attrs) == volume
        assert exec_in(new.id, "cat", "/data/marker") == "kept\n"
    finally:
        for c in docker.containers.list(all=True, filters={"name": "gameday-recreate-test"}):
            c.remove(force=True, v=True)
        if volume:
            docker.volumes.get(volume).remove(force=True)


def killed_run(state: Path, inventory: Path, tmp_path: Path) -> None:
    """A run of the scenario killed with -9 once its fault is in place."""
    log = tmp_path / "run.log"
    argv = ["run", SCENARIO, "--lab", str(inventory), "--reports", str(tmp_path)]
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
      adopt: {{deployment: team-vllm{lease}}}
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
    """The real control plane and our kubelet, its kubeconfig and clients."""
    kubeconfig = tmp_path / "kubeapi" / "kubeconfig"
    with real_cluster(tmp_path / "kubereal", kubeconfig):
        api = config.new_client_from_config(config_file=str(kubeconfig))
        yield kubeconfig, client.CoreV1Api(api), client.AppsV1Api(api)


def kube_inventory(tmp_path: Path, kubeconfig: Path, lab: str, lease_s: int = 0) -> Path:
    inv = tmp_path / f"{lab}.yaml"
    lease = f", lease_s: {lease_s}" if lease_s else ""
    inv.write_text(KUBE_INVENTORY.format(lab=lab, kubeconfig=kubeconfig, lease=lease))
    return inv


def engine_args(apps: Any) -> list[str]:
    d = apps.read_namespaced_deployment("team-vllm", "team-ml")
    return list(d.spec.template.spec.containers[0].args)


def team_deploys(apps: Any, args: list[str]) -> None:
    """The team's own rollout of new args (as `kubectl apply` of its edited manifest would): a
    patch, which the deployment controller's own status updates never conflict with, where a
    read-then-replace carries a resourceVersion that one of them may have moved on (409)."""
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
    apps.patch_namespaced_deployment("team-vllm", "team-ml", patch)


def lease_annotation(apps: Any) -> dict[str, Any] | None:
    d = apps.read_namespaced_deployment("team-vllm", "team-ml")
    text = (d.metadata.annotations or {}).get("gameday.io/fault-lease")
    return json.loads(text) if text else None


@pytest.mark.kube_real
def test_a_deployment_the_team_changed_since_adoption_is_not_overwritten_and_is_readopted(
    kube: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    kubeconfig, core, apps = kube
    core.create_namespace({"metadata": {"name": "team-ml", "labels": {"gameday.io/lab": LAB}}})
    apps.create_namespaced_deployment("team-ml", team_deployment())
    inv = kube_inventory(tmp_path, kubeconfig, LAB)
    state = tmp_path / "state"
    killed_run(state, inv, tmp_path)
    assert "16384" in engine_args(apps)  # the fault, left by the killed run
    newer = [a if a != "4096" else "8192" for a in ENGINE_ARGS]
    team_deploys(apps, newer)  # the team fixes its service its own way meanwhile
    r = gd(state, "cleanup", "--lab", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    assert engine_args(apps) == newer  # not the baseline saved before
    assert "left serving as the team deployed it anew since adoption" in r.stderr
    r = gd(state, "run", SCENARIO, "--lab", str(inv), "--reports", str(tmp_path))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "serving changed since gameday adopted it" in r.stderr
    assert f"hint: to take what runs now as the baseline: gameday lab up --lab {inv} --readopt" in (
        r.stderr
    )
    assert engine_args(apps) == newer
    r = gd(state, "lab", "up", "--lab", str(inv), "--readopt")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"lab '{LAB}' re-adopted serving: what runs now is the baseline" in r.stderr
    saved = json.loads((state / LAB / "adopted.json").read_text())
    assert saved["args"] == newer
    assert lease_annotation(apps) is None  # the old lease went with the old baseline
    down = gd(state, "lab", "down", "--lab", str(inv))
    assert down.returncode == 0, down.stdout + down.stderr
    assert engine_args(apps) == newer


@pytest.mark.kube_real
def test_a_killed_runners_fault_lease_runs_out_and_cleanup_expired_puts_it_back(
    kube: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    kubeconfig, core, apps = kube
    core.create_namespace({"metadata": {"name": "team-ml", "labels": {"gameday.io/lab": LAB}}})
    apps.create_namespaced_deployment("team-ml", team_deployment())
    original = copy.deepcopy(apps.read_namespaced_deployment("team-vllm", "team-ml").spec)
    inv = kube_inventory(tmp_path, kubeconfig, LAB, lease_s=20)
    state = tmp_path / "state"
    killed_run(state, inv, tmp_path)
    lease = lease_annotation(apps)
    assert lease is not None and lease["lab"] == LAB
    assert lease["baseline"]["args"] == ENGINE_ARGS
    ends = datetime.fromisoformat(lease["expires"])
    assert 0 < (ends - datetime.now(UTC)).total_seconds() <= 20
    # the CronJob: the cluster only, none of this machine's state
    cron = tmp_path / "cronjob-state"
    r = gd(cron, "cleanup", "--expired", "--lab", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the fault lease holds until" in r.stderr and "nothing was touched" in r.stderr
    assert "16384" in engine_args(apps)
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 1)
    r = gd(cron, "cleanup", "--expired", "--lab", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restored serving from the lease's record" in r.stderr
    d = apps.read_namespaced_deployment("team-vllm", "team-ml")
    assert d.spec.template == original.template
    assert lease_annotation(apps) is None
    r = gd(cron, "cleanup", "--expired", "--lab", str(inv))
    assert "no fault lease is held; nothing to undo" in r.stderr
    # the killed runner's machine: its journal finds the deployment already back
    generation = apps.read_namespaced_deployment("team-vllm", "team-ml").metadata.generation
    assert gd(state, "cleanup", "--lab", str(inv)).returncode == 0
    assert gd(state, "lab", "down", "--lab", str(inv)).returncode == 0
    d = apps.read_namespaced_deployment("team-vllm", "team-ml")
    assert d.metadata.generation == generation and d.spec.template == original.template


@pytest.mark.kube_real
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


@pytest.mark.kube_real
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


def adopted_lab(tmp_path: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The adopted lab in this process, its baseline saved, as `lab up` leaves it."""
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "state"))
    lab = open_lab(load_inventory(kube_inventory(tmp_path, kubeconfig, LAB)))
    lab.readopt()
    return lab


def written_meanwhile(lab: Any, monkeypatch: pytest.MonkeyPatch, write: Any) -> list[int]:
    """`write` made through the API right after the lab's first read of the workload, as a
    write of someone else's between the lab's read and its replace; the reads counted."""
    read = lab._read
    reads: list[int] = []

    def racing() -> dict[str, Any]:
        obj = read()
        reads.append(int(obj["metadata"]["resourceVersion"]))
        if len(reads) == 1:
            write()
        return dict(obj)

    monkeypatch.setattr(lab, "_read", racing)
    return reads


@pytest.mark.kube_real
def test_a_fault_written_while_something_else_wrote_the_deployment_is_made_again_on_what_it_holds(
    kube: tuple[Path, Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig, core, apps = kube
    core.create_namespace({"metadata": {"name": "team-ml", "labels": {"gameday.io/lab": LAB}}})
    apps.create_namespaced_deployment("team-ml", team_deployment())
    lab = adopted_lab(tmp_path, kubeconfig, monkeypatch)
    faulted = lab.config("serving").model_copy(
        update={"args": tuple(a if a != "4096" else "16384" for a in ENGINE_ARGS)}
    )
    label = {"metadata": {"labels": {"team.example/on-call": "kim"}}}
    reads = written_meanwhile(
        lab, monkeypatch, lambda: apps.patch_namespaced_deployment("team-vllm", "team-ml", label)
    )
    lab._write(faulted)
    # the replace with the first read's resourceVersion met a real 409; read again and written
    # (the controller's own status writes may add a 409 more on a loaded machine)
    assert len(reads) >= 2 and reads == sorted(reads) and reads[1] > reads[0]
    d = apps.read_namespaced_deployment("team-vllm", "team-ml")
    assert "16384" in d.spec.template.spec.containers[0].args
    assert d.metadata.labels["team.example/on-call"] == "kim"  # the other write, kept
    assert lease_annotation(apps) is not None


@pytest.mark.kube_real
def test_a_fault_written_while_the_team_changed_the_engine_container_is_refused_and_theirs_kept(
    kube: tuple[Path, Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig, core, apps = kube
    core.create_namespace({"metadata": {"name": "team-ml", "labels": {"gameday.io/lab": LAB}}})
    apps.create_namespaced_deployment("team-ml", team_deployment())
    lab = adopted_lab(tmp_path, kubeconfig, monkeypatch)
    faulted = lab.config("serving").model_copy(
        update={"args": tuple(a if a != "4096" else "16384" for a in ENGINE_ARGS)}
    )
    newer = [a if a != "4096" else "8192" for a in ENGINE_ARGS]
    reads = written_meanwhile(lab, monkeypatch, lambda: team_deploys(apps, newer))
    with pytest.raises(LabError, match="container engine changed since gameday adopted it"):
        lab._write(faulted)
    assert len(reads) == 2  # the 409, then the check on what the object holds now
    assert engine_args(apps) == newer
    assert lease_annotation(apps) is None
