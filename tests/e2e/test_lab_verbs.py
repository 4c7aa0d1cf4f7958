"""`gameday lab ps|logs|restart|stop|start|config` on real labs, each verb in its own process
as a person (or a runbook's command step) runs it, and what they did read back by a driver of
this process, as a running `gameday run` reads it: the local lab, then the compose lab."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.labs.base import LabDriver, NodeState
from runner.labs.compose.driver import ComposeLab
from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import NodeStatus
from tests.support.cli import ROOT, docker_or_skip, gameday, inventory, ok

pytestmark = pytest.mark.e2e
TP = ["node1", "node2", "node3", "node4"]


def wait(
    lab: LabDriver, node: str, cond: Callable[[NodeState], Any], timeout: float = 30
) -> NodeState:
    """The node's state once `cond` holds, woken by the lab's events."""
    deadline = time.monotonic() + timeout
    seq = lab.last_event_seq()
    while True:
        st = lab.states()[node]
        if cond(st):
            return st
        assert time.monotonic() < deadline, f"{node}: {st}"
        events = lab.wait_events(seq, min(1.0, deadline - time.monotonic()))
        seq = events[-1].seq if events else seq


def ps(inv: Path) -> dict[str, Any]:
    return dict(json.loads(ok(gameday("lab", "ps", "--json", "--lab", str(inv))).stdout))


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LocalLab]]:
    tmp = tmp_path_factory.mktemp("verbs")
    # its own state directory: each test gets its own GAMEDAY_STATE_DIR, the lab outlives them
    named = f"name: verbs\n      state_dir: {tmp / 'lab-state'}"
    inv = inventory(tmp, "127.0.78.62", **{"name: local": named})
    ok(gameday("lab", "up", "--lab", str(inv)))
    try:
        yield inv, LocalLab(load_inventory(inv))
    finally:
        ok(gameday("lab", "down", "--lab", str(inv), timeout=60))


def test_ps_takes_the_lab_from_gameday_lab(local: tuple[Path, LocalLab]) -> None:
    inv, _ = local
    p = ok(gameday("lab", "ps", "--json", env={"GAMEDAY_LAB": str(inv)}))
    rows = json.loads(p.stdout)
    assert list(rows) == ["serving", *TP]
    assert [r["role"] for r in rows.values()] == ["serving", "head", "worker", "worker", "worker"]
    assert {(r["status"], r["ready"]) for r in rows.values()} == {("running", True)}
    assert all(r["process"].startswith("pid ") for r in rows.values())
    assert rows["serving"]["url"] == "http://127.0.78.62:8000"


def test_config_reapplies_and_a_run_reads_it_back(local: tuple[Path, LocalLab]) -> None:
    inv, lab = local
    before = ps(inv)["serving"]["generation"]
    p = ok(
        gameday("lab", "config", "serving", "--lab", str(inv), "--set-arg", "--max-model-len=2048")
    )
    assert f"(generation {before + 1})" in p.stderr + p.stdout
    assert ps(inv)["serving"]["generation"] == before + 1
    args = LocalLab(load_inventory(inv)).config("serving").args
    assert args[args.index("--max-model-len") + 1] == "2048"
    ok(gameday("lab", "config", "serving", "--lab", str(inv), "--set-arg", "--max-model-len=4096"))
    wait(lab, "serving", lambda s: s.ready)
    assert lab.config("serving") == lab.baseline_config("serving")


def test_typo_and_unknown_node_are_exit_2(local: tuple[Path, LocalLab]) -> None:
    inv, _ = local
    p = gameday("lab", "config", "serving", "--lab", str(inv), "--set-arg", "--max-modellen=1")
    assert p.returncode == 2 and "did you mean '--max-model-len'?" in p.stderr
    p = gameday("lab", "stop", "nod2", "--lab", str(inv))
    assert p.returncode == 2 and "did you mean 'node2'?" in p.stderr


def test_restart_a_group_restarts_all_its_nodes(local: tuple[Path, LocalLab]) -> None:
    inv, lab = local
    before = ps(inv)
    ok(gameday("lab", "restart", "tp_group", "--lab", str(inv)))
    after = ps(inv)
    assert {n: after[n]["generation"] - before[n]["generation"] for n in after} == {
        "serving": 0,
        **{n: 1 for n in TP},
    }
    for n in TP:
        wait(lab, n, lambda s: s.ready)


def test_stop_keeps_a_node_stopped_until_start(local: tuple[Path, LocalLab]) -> None:
    inv, lab = local
    gen = ps(inv)["node2"]["generation"]
    ok(gameday("lab", "stop", "node2", "--lab", str(inv)))
    st = lab.states()["node2"]
    assert (st.status, st.ready, st.pid) == (NodeStatus.EXITED, False, None)
    time.sleep(0.5)  # an on-failure policy would restart a failed node by now
    assert lab.states()["node2"].status is NodeStatus.EXITED
    ok(gameday("lab", "start", "node2", "--lab", str(inv)))
    st = wait(lab, "node2", lambda s: s.ready)
    assert (st.status, st.generation) == (NodeStatus.RUNNING, gen + 1)


def test_logs_previous_after_a_failing_config(local: tuple[Path, LocalLab]) -> None:
    inv, lab = local
    ok(
        gameday(
            "lab", "config", "serving", "--lab", str(inv), "--set-arg", "--max-model-len=131072"
        )
    )
    wait(lab, "serving", lambda s: s.last_exit is not None and s.last_exit.code == 1)
    p = ok(gameday("lab", "logs", "serving", "--previous", "--lab", str(inv)))
    assert "validation error for ModelConfig" in p.stdout
    ok(gameday("lab", "config", "serving", "--lab", str(inv), "--set-arg", "--max-model-len=4096"))
    wait(lab, "serving", lambda s: s.ready)


def test_logs_follow_streams_until_ctrl_c(local: tuple[Path, LocalLab]) -> None:
    inv, lab = local
    marker = "Application startup complete"
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "lab",
            "logs",
            "serving",
            "-f",
            "--lab",
            str(inv),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
        # a test run started in the background (`make test &`) ignores SIGINT, and a child
        # inherits that: Ctrl-C is the user's, so the follower gets the default back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert follow.stdout is not None
        seen = 0
        for line in follow.stdout:
            if marker in line:
                seen += 1
                if seen == 1:  # the current incarnation's: now a new one's must follow
                    ok(gameday("lab", "restart", "serving", "--lab", str(inv)))
                else:
                    break
        assert seen == 2
    finally:
        follow.send_signal(signal.SIGINT)
        # drain both pipes while it exits: a writer blocked on a full pipe never gets there
        _, err = follow.communicate(timeout=30)
    assert follow.returncode == 0, err
    wait(lab, "serving", lambda s: s.ready)


def test_compose_ps_restart_config(tmp_path: Path) -> None:
    docker_or_skip()
    inv = ROOT / "inventories" / "compose.yaml"
    ok(gameday("lab", "build", "--lab", str(inv), timeout=900))
    ok(gameday("lab", "up", "--lab", str(inv), timeout=900))
    try:
        lab = ComposeLab(load_inventory(inv))
        rows = ps(inv)
        assert {(r["status"], r["ready"]) for r in rows.values()} == {("running", True)}
        gen = rows["serving"]["generation"]
        ok(gameday("lab", "restart", "serving", "--lab", str(inv)))
        assert ps(inv)["serving"]["generation"] == gen + 1
        wait(lab, "serving", lambda s: s.ready, 120)
        ok(
            gameday(
                "lab", "config", "serving", "--lab", str(inv), "--set-arg", "--max-model-len=2048"
            )
        )
        assert ps(inv)["serving"]["generation"] == gen + 2
        args = ComposeLab(load_inventory(inv)).config("serving").args
        assert args[args.index("--max-model-len") + 1] == "2048"
        ok(gameday("lab", "stop", "serving", "--lab", str(inv)))
        st = lab.states()["serving"]
        assert (st.status, st.ready) == (NodeStatus.EXITED, False)
        time.sleep(1)  # its `always` policy would have restarted a container that failed
        assert lab.states()["serving"].status is NodeStatus.EXITED
        ok(gameday("lab", "start", "serving", "--lab", str(inv)))
        st = wait(lab, "serving", lambda s: s.ready, 120)
        assert st.generation == gen + 3
    finally:
        ok(gameday("lab", "down", "--lab", str(inv), timeout=300))


@pytest.mark.kube_real
def test_kubernetes_stop_scales_to_zero_and_start_back(tmp_path: Path) -> None:
    from kubernetes import client, config

    from runner.labs.kubernetes.driver import KubernetesLab
    from tests.support.kubecluster import real_cluster

    kubeconfig = ROOT / "build" / "kubeapi" / "kubeconfig"
    inv = ROOT / "inventories" / "kube-testserver.yaml"
    # the real control plane and our kubelet, at the inventory's kubeconfig
    with real_cluster(tmp_path / "kubereal", kubeconfig):
        apps = client.AppsV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        ok(gameday("lab", "up", "--lab", str(inv)))
        lab = KubernetesLab(load_inventory(inv))
        try:
            assert ps(inv)["serving"]["process"].startswith("pod serving-")
            # a generation on Kubernetes counts the pods a driver's watch saw: this one's, from now
            gen = lab.states()["serving"].generation
            ok(gameday("lab", "stop", "serving", "--lab", str(inv)))
            assert apps.read_namespaced_deployment("serving", lab.ns).spec.replicas == 0
            wait(lab, "serving", lambda s: s.status is NodeStatus.PENDING and s.reason == "no pod")
            ok(gameday("lab", "start", "serving", "--lab", str(inv)))
            assert apps.read_namespaced_deployment("serving", lab.ns).spec.replicas == 1
            st = wait(lab, "serving", lambda s: s.ready, 60)
            assert st.generation == gen + 1
            flag = ["--set-arg", "--max-model-len=2048"]
            ok(gameday("lab", "config", "serving", "--lab", str(inv), *flag))
            args = KubernetesLab(load_inventory(inv)).config("serving").args
            assert args[args.index("--max-model-len") + 1] == "2048"
        finally:
            ok(gameday("lab", "down", "--lab", str(inv), timeout=120))
