"""The runtime scenarios on the Kubernetes lab against the real control plane (tests/kubereal:
kube-apiserver, controller-manager and scheduler v1.20) and our kubelet (containers in their own
PID namespaces, logs and exec through the API server, a real Prometheus in the lab's namespace):
head-only-restart with the kubelet restarting the head alone,
engine-core-hang, dhcp-address-change not applicable with its reason, pd-kv-handshake with the
prefill, the decode and the proxy as pods of their own; and a runner SIGKILLed
mid-scenario (stray-gpu-process) cleaned up by its journal. stray-gpu-process's verdict is
test_kubernetes_lab.py's, with its group pinned to its nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.labs.kubernetes import stray
from runner.labs.kubernetes.driver import KubernetesLab
from runner.spec.inventory_load import load_inventory
from tests.e2e import test_kubernetes_lab as kube_lab
from tests.support.cli import ROOT, gameday, ok
from tests.support.kubecluster import RealCluster

pytestmark = [pytest.mark.e2e, pytest.mark.kube_real]
INVENTORY = ROOT / "inventories" / "kube-testserver.yaml"
RUNTIME = [
    "head-only-restart",
    "dhcp-address-change",
    "engine-core-hang",
    "nccl-watchdog-timeout",
    "gpu-xid-error",
    "pd-kv-handshake",
]
# the real control plane and our kubelet, its client and a state folder: the Kubernetes lab
# tests' module fixtures
server, core, state = kube_lab.server, kube_lab.core, kube_lab.state


def gd(state: Path, *args: str, timeout: float = 900) -> Any:
    return gameday(*args, timeout=timeout, env={"GAMEDAY_STATE_DIR": str(state)})


def by_name(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in s["assertions"]}


def test_the_runtime_scenarios_on_kubernetes(
    server: RealCluster, state: Path, tmp_path: Path, core: Any
) -> None:
    files = [str(ROOT / "scenarios" / f"{s}.yaml") for s in RUNTIME]
    r = gd(state, "run", *files, "--lab", str(INVENTORY), "--reports", str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    scenarios = {s["id"]: s for s in json.loads(r.stdout)["scenarios"]}
    verdicts = {k: v["verdict"] for k, v in scenarios.items()}
    assert verdicts == {
        "head-only-restart": "passed",
        "dhcp-address-change": "skipped",
        "engine-core-hang": "passed",
        "nccl-watchdog-timeout": "skipped",  # a container's PID 1 cannot be stopped from exec
        "gpu-xid-error": "skipped",  # the kernel log and the device are the node's, no pod's
        "pd-kv-handshake": "passed",
    }, {k: [a for a in v["assertions"] if a["verdict"] != "passed"] for k, v in scenarios.items()}
    dhcp = scenarios["dhcp-address-change"]["notes"]
    assert dhcp[0] == "applies to local, compose, not to a kubernetes lab"
    assert "Prometheus discovers nodes through the API" in " ".join(dhcp[1].split())
    xid = scenarios["gpu-xid-error"]["notes"]
    assert xid[0] == "applies to local, compose, not to a kubernetes lab"
    assert "outside every pod" in " ".join(xid[1].split())

    head = scenarios["head-only-restart"]
    a = by_name(head)
    # the kubelet restarted the head alone: one restart, the workers none, serving still down
    assert a["expect: state"]["observed"].startswith("running")
    assert a["expect: state"]["observed"].endswith("restarts 1")
    assert a["expect: exit code"]["observed"] == "exit code 0"
    assert "per_lab.kubernetes" in " ".join(head["notes"])
    recover = [x for x in head["assertions"] if x["phase"] == "recover"]
    # the group restart and its impact bound on the users' traffic
    assert len(recover) >= 2 and {x["verdict"] for x in recover} == {"passed"}
    assert "does NOT restore" in recover[0]["name"]
    # fired, and delivered: Prometheus -> the Alertmanager pod behind its Service -> the runner's
    # receiver, with the DeepGEMM crash write-up's annotations
    alerts = [x for x in head["assertions"] if x["phase"] == "detect"]
    assert [x["name"] for x in alerts] == [
        "detect: alert ServingDown fires",
        "detect: alert ServingDown delivered",
    ]
    assert [x["verdict"] for x in alerts] == ["passed", "passed"], alerts
    assert "restart all four together" in alerts[1]["observed"]
    assert any(e["event"].startswith("alert ServingDown delivered") for e in head["timeline"])

    hang = by_name(scenarios["engine-core-hang"])
    # the pod's probes ask /health: 200 (the pod stays Ready) while no request completes
    assert hang["expect: GET /health"]["observed"] == "HTTP 200"
    assert hang["expect: inference (chat) hangs"]["verdict"] == "passed"
    assert hang["expect: state of serving"]["observed"].startswith("running, restarts 0")

    pd = scenarios["pd-kv-handshake"]
    a = by_name(pd)
    # the decode pod dialled the localhost the prefill advertised: its own loopback, not the
    # prefill's; the proxy answered 200 and broke the body off
    handshake = next(x for x in pd["assertions"] if "signature 3/4" in x["name"])
    assert "'remote_host': 'localhost'" in handshake["observed"]
    assert a["expect: GET /health on decode"]["observed"] == "HTTP 200"
    recover = [x for x in pd["assertions"] if x["phase"] == "recover"]
    assert {x["verdict"] for x in recover} == {"passed"}
    assert [x["name"].split(":")[0] for x in recover if "does NOT restore" in x["name"]] == [
        "recover 1",
        "recover 2",
    ]
    assert "per_lab.kubernetes" in " ".join(pd["notes"])

    # the suite brought the lab up and took it down: nothing of it is left
    assert "gameday-lab" not in [n.metadata.name for n in core.list_namespace().items]


def wait_for(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout} s")


def test_a_runner_killed_mid_scenario_is_cleaned_up_by_its_journal(
    server: RealCluster, state: Path, tmp_path: Path, core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(state))
    inv = load_inventory(INVENTORY)
    ok(gd(state, "lab", "up", "--lab", str(INVENTORY)))
    lab = KubernetesLab(inv)
    try:
        env = {**os.environ, "GAMEDAY_STATE_DIR": str(state)}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runner.cli",
                "run",
                str(ROOT / "scenarios" / "stray-gpu-process.yaml"),
                "--lab",
                str(INVENTORY),
                "--reports",
                str(tmp_path),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        sel = stray.selector(inv)
        # the stray pod runs and the engine died of it: the runner is mid-scenario
        wait_for(
            "stray pod", lambda: core.list_namespaced_pod(lab.ns, label_selector=sel).items, 120
        )
        wait_for(
            "head restart",
            lambda: any(
                (cs.restart_count or 0) >= 1
                for p in core.list_namespaced_pod(
                    lab.ns, label_selector="gameday.io/node=node1"
                ).items
                for cs in p.status.container_statuses or []
            ),
            120,
        )
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert core.list_namespaced_pod(lab.ns, label_selector=sel).items  # left behind
        r = gd(state, "cleanup", "--lab", str(INVENTORY))
        assert r.returncode == 0, r.stdout + r.stderr
        assert core.list_namespaced_pod(lab.ns, label_selector=sel).items == []
        assert lab.leftovers() == []  # every node serving, no stray, baseline configs
        prom = lab.prometheus_url()
        assert prom is not None
        import httpx

        up = httpx.get(prom + "/api/v1/query", params={"query": 'up{job="vllm"}'}, timeout=5)
        assert up.status_code == 200
    finally:
        ok(gd(state, "lab", "down", "--lab", str(INVENTORY)))
    assert lab.leftover_objects() == []
