"""A tensor-parallel group as one LeaderWorkerSet (group_workload: leaderworkerset): the object,
the inventory errors, `gameday lab manifests`, and `lab up` on a cluster without LWS."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from runner.cli.main import main
from runner.errors import InventoryError, LabError
from runner.labs.kubernetes import lab_objects, lws
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes.driver import KubernetesLab
from runner.spec.inventory_load import load_inventory
from tests.kubeapi.server import Server
from tests.support.cli import ROOT

BASE = ROOT / "inventories" / "kube-testserver.yaml"
GROUP_MARK = "    # seeds/000's 4-node tensor-parallel group"
ADDR = "node1-0.tp-group.gameday-lab.svc.cluster.local"
COMMON = ["Qwen/Qwen2.5-14B-Instruct-AWQ", "--tensor-parallel-size", "4", "--nnodes", "4"]
TAIL = ["--master-port", "29501", "--gpu-memory-utilization", "0.92", "--max-model-len", "4096"]


def q(args: list[str]) -> str:
    return ", ".join(f'"{a}"' for a in args)


def worker(name: str, rank: str, extra: str = "") -> str:
    return f"""            {name}:
              gameday_role: worker
              gameday_address: 0.0.0.0
              gameday_engine_args: [{q(COMMON)}, --node-rank, "{rank}",
                --master-addr, {ADDR}, {q(TAIL)}, --headless{extra}]
"""


def group(ranks: tuple[str, ...] = ("1", "2", "3"), extra: str = "") -> str:
    return (
        f"""
    tp_group:
      vars:
        gameday_gpu: {{type: a10g, count: 1}}
        gameday_port: 8000
        gameday_engine_env: {{VLLM_WORKER_MULTIPROC_METHOD: spawn}}
      children:
        head:
          hosts:
            node1:
              gameday_role: head
              gameday_address: 0.0.0.0
              gameday_engine_args: [{q(COMMON)}, --node-rank, "0",
                --master-addr, {ADDR}, {q(TAIL)}, --host, "{{address}}", --port, "{{port}}"]
        worker:
          hosts:
"""
        + worker("node2", ranks[0])
        + worker("node3", ranks[1])
        + worker("node4", ranks[2], extra)
    )


def write(tmp_path: Path, workload: str = "leaderworkerset", **kw: str) -> Path:
    # the shipped inventory without its own group: the tests add the group they vary
    text = (
        BASE.read_text()
        .split(GROUP_MARK)[0]
        .replace(
            "        enable_service_links: false\n",
            f"        enable_service_links: false\n        group_workload: {workload}\n",
        )
    )
    text = text.replace("../build/kubeapi/kubeconfig", str(tmp_path / "kube" / "kubeconfig"))
    # and without its Prometheus (tests/unit/runner/labs/test_kube_monitoring.py has it)
    text = re.sub(r"\n      monitoring:\n(        .*\n)+", "\n", text)
    p = tmp_path / "inventory.yaml"
    p.write_text(text + group(**kw))  # type: ignore[arg-type]
    return p


LINE = 24  # of group_workload in the inventory write() makes
LEADER_ARGS = [
    *COMMON,
    "--node-rank",
    "$(LWS_WORKER_INDEX)",
    "--master-addr",
    "$(LWS_LEADER_ADDRESS)",
    *TAIL,
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
]
WORKER_ARGS = [
    *COMMON,
    "--node-rank",
    "$(LWS_WORKER_INDEX)",
    "--master-addr",
    "$(LWS_LEADER_ADDRESS)",
    *TAIL,
    "--headless",
]


def test_the_group_is_one_leaderworkerset(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path))
    docs = lab_objects.all_manifests(inv)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Namespace", "gameday-lab"),
        ("Service", "vllm"),
        ("Deployment", "serving"),
        ("LeaderWorkerSet", "tp-group"),  # LWS makes the group's headless Service itself
    ]
    obj = docs[3]
    assert obj["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert obj["metadata"]["namespace"] == "gameday-lab"
    spec = obj["spec"]
    assert (spec["replicas"], spec["startupPolicy"]) == (1, "LeaderCreated")
    lwt = spec["leaderWorkerTemplate"]
    assert (lwt["size"], lwt["restartPolicy"]) == (4, "RecreateGroupOnPodRestart")
    leader, work = lwt["leaderTemplate"], lwt["workerTemplate"]
    lc, wc = leader["spec"]["containers"][0], work["spec"]["containers"][0]
    assert lc["command"] == wc["command"] == ["vllm-lab", "serve"]
    assert lc["args"] == LEADER_ARGS
    assert wc["args"] == WORKER_ARGS
    assert leader["metadata"]["labels"] == {
        "gameday.io/lab": "kube-testserver",
        "app.kubernetes.io/managed-by": "gameday",
        "app.kubernetes.io/name": "node1",
        "gameday.io/node": "node1",
        "gameday.io/group": "tp-group",
    }
    assert work["metadata"]["labels"] == {
        "gameday.io/lab": "kube-testserver",
        "app.kubernetes.io/managed-by": "gameday",
        "gameday.io/group": "tp-group",
    }
    # the head is probed, a headless worker has no HTTP
    assert lc["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert "startupProbe" not in wc and "readinessProbe" not in wc
    for c in (lc, wc):
        assert c["resources"]["requests"]["nvidia.com/gpu"] == "1"
        assert c["env"] == [
            {"name": "VLLM_WORKER_MULTIPROC_METHOD", "value": "spawn"},
            {"name": "GAMEDAY_TIME_SCALE", "value": "100"},
        ]
    for t in (leader, work):
        assert t["spec"]["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ]
        assert t["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_the_leader_and_worker_pods_match_their_statefulsets(tmp_path: Path) -> None:
    """Beyond the rank arguments, the templates are the StatefulSets' pod templates."""
    inv = load_inventory(write(tmp_path))
    lwt = lws.leaderworkerset(inv, "tp-group")["spec"]["leaderWorkerTemplate"]
    for node, key in (("node1", "leaderTemplate"), ("node2", "workerTemplate")):
        sts = mf.statefulset(inv, inv.node(node))["spec"]["template"]["spec"]
        tmpl = lwt[key]["spec"]
        for pod in (sts, tmpl):
            del pod["containers"][0]["args"]
        assert tmpl == sts


def test_statefulsets_stay_the_default(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, workload="statefulsets"))
    kinds = [(d["kind"], d["metadata"]["name"]) for d in lab_objects.all_manifests(inv)]
    assert kinds == [
        ("Namespace", "gameday-lab"),
        ("Service", "vllm"),
        ("Service", "tp-group"),
        ("Deployment", "serving"),
        ("StatefulSet", "node1"),
        ("StatefulSet", "node2"),
        ("StatefulSet", "node3"),
        ("StatefulSet", "node4"),
    ]


def test_ranks_that_are_not_leader_0_workers_1_to_3_are_refused(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, ranks=("1", "2", "5")))
    with pytest.raises(InventoryError) as e:
        lab_objects.all_manifests(inv)
    assert e.value.message == f"{inv.path}:{LINE} [{lws.FIELD}]: " + (
        "group 'tp-group' has --node-rank [0, 1, 2, 5] (head first); LWS numbers the leader 0 "
        "and the workers 1..3"
    )
    assert e.value.field == "all.vars.gameday_lab.kubernetes.group_workload"


def test_workers_that_differ_beyond_their_rank_are_refused(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, extra=", --enforce-eager"))
    with pytest.raises(InventoryError) as e:
        lab_objects.all_manifests(inv)
    assert e.value.message == f"{inv.path}:{LINE} [{lws.FIELD}]: " + (
        "group 'tp-group' workers node2 and node4 differ in more than --node-rank; "
        "a LeaderWorkerSet has one worker template"
    )


def test_lab_manifests_prints_the_leaderworkerset(tmp_path: Path) -> None:
    inv_path = write(tmp_path)
    r = CliRunner().invoke(main, ["lab", "manifests", "--lab", str(inv_path)])
    assert r.exit_code == 0, r.output
    docs = list(yaml.safe_load_all(r.stdout))
    assert docs == lab_objects.all_manifests(load_inventory(inv_path))
    assert docs[3]["kind"] == "LeaderWorkerSet"


def test_lab_up_without_the_lws_api_says_how_to_install_it_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "state"))
    inv_path = write(tmp_path)
    srv = Server(0, tmp_path / "kube" / "kubeconfig", time_scale=100).start()
    try:
        r = CliRunner().invoke(main, ["lab", "up", "--lab", str(inv_path)])
        assert r.exit_code == 3, r.output
        assert (
            "the cluster serves no leaderworkerset.x-k8s.io/v1 API (LeaderWorkerSet is not "
            "installed), and group_workload is leaderworkerset: nothing was created"
        ) in r.stderr
        assert (
            "kubectl apply --server-side -f "
            "https://github.com/kubernetes-sigs/lws/releases/download/v0.8.0/manifests.yaml"
        ) in r.stderr
        assert "Traceback" not in r.stderr
        lab = KubernetesLab(load_inventory(inv_path))
        assert lab.kube.namespace() is None  # nothing created, not even the namespace
    finally:
        srv.stop()


def test_the_api_check_passes_when_the_cluster_serves_lws() -> None:
    class Kube:
        client = None
        calls: list[tuple[str, str]] = []  # noqa: RUF012

        def status_of(self, fn: object, group: str, version: str) -> tuple[int, object]:
            self.calls.append((group, version))
            return 200, object()

    kube = Kube()
    lws.require_api(kube)
    assert kube.calls == [("leaderworkerset.x-k8s.io", "v1")]
    kube.status_of = lambda fn, g, v: (404, None)  # type: ignore[method-assign]
    with pytest.raises(LabError):
        lws.require_api(kube)
