"""The Kubernetes lab: the driver on the official client against the real control plane
(tests/kubereal: kube-apiserver, controller-manager and scheduler v1.20) and our kubelet. The
start-up scenarios unchanged,
previous logs and exit times from the container status, the namespace guard, `lab down`
deleting only what gameday created, and every manifest checked against the Kubernetes schemas."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from runner.labs.base import ChangeKind, NodeConfig
from runner.labs.common import planning
from runner.labs.kubernetes import lab_objects
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes.driver import KubernetesLab
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind, LogSource, NodeStatus
from tests.support import cli as conftest
from tests.support.cli import ROOT, gameday, ok
from tests.support.kubecluster import RealCluster, pinned_inventory, real_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.kube_real]
INVENTORY = ROOT / "inventories" / "kube-testserver.yaml"
KUBECONFIG = ROOT / "build" / "kubeapi" / "kubeconfig"
STARTUP = [
    "service-name-collision",
    "kv-cache-shortage",
    "context-window-overflow",
    "tp-mismatch",
    "tp-head-divisibility",  # the tensor-parallel group's StatefulSets, re-formed on three
    "lora-rank-over-max",  # fails only once the engine is up, as kv-cache-shortage does
    "cuda-graph-capture-oom",
]
REQUEST_TIME = "missing-chat-template"  # the server starts; chat requests are refused
K8S_VERSION = kubernetes_validate.utils.latest_version()


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kube-state")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real control plane and our kubelet, at the inventory's kubeconfig."""
    with real_cluster(tmp_path_factory.mktemp("kubereal"), KUBECONFIG) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def core(server: RealCluster) -> Any:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(KUBECONFIG)))


def gd(state: Path, *args: str, timeout: float = 600, **env: str) -> Any:
    return gameday(*args, timeout=timeout, env={"GAMEDAY_STATE_DIR": str(state), **env})


def variant(tmp_path: Path, **replace: str) -> Path:
    paths = {"../build/kubeapi/kubeconfig": str(KUBECONFIG)}
    return conftest.variant(INVENTORY, tmp_path, paths | replace)


def test_the_startup_scenarios_and_a_request_time_one_pass_unchanged(
    server: RealCluster, state: Path, tmp_path: Path, core: Any
) -> None:
    files = [str(ROOT / "scenarios" / f"{s}.yaml") for s in [*STARTUP, REQUEST_TIME]]
    r = gd(state, "run", *files, "--lab", str(INVENTORY), "--reports", str(tmp_path), "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout)
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert sorted(by_id) == sorted([*STARTUP, REQUEST_TIME])
    # the pod serves, and only a chat request is refused: nothing exits, no previous log
    chat = by_id.pop(REQUEST_TIME)
    assert chat["verdict"] == "passed"
    refused = [a for a in chat["assertions"] if a["name"] == "expect: inference (chat) refused"]
    assert [a["verdict"] for a in refused] == ["passed"]
    assert "default chat template is no longer allowed" in refused[0]["observed"]
    for sid, s in by_id.items():
        assert s["verdict"] == "passed", sid
        titles = [e["title"] for e in s["evidence"]]
        # the signature was read from the previous container's log, as `kubectl logs --previous`
        assert any(t.startswith("expect: previous logs") for t in titles), (sid, titles)
        assert s["time_to_fail_s"] is not None
    # the kubelet's probe Events are kept as evidence: the EKS start-failure write-up's
    # misleading second signal
    events = [
        ln["text"]
        for s in by_id.values()
        for e in s["evidence"]
        if e["title"].startswith("Kubernetes Events")
        for ln in e["lines"]
    ]
    assert any("Startup probe failed" in t and "connection refused" in t for t in events), events
    # the suite brought the lab up and took it down: nothing of it is left
    namespaces = [n.metadata.name for n in core.list_namespace().items]
    assert "gameday-lab" not in namespaces


@pytest.fixture
def lab(
    server: RealCluster, state: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[KubernetesLab]:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(state))
    driver = KubernetesLab(load_inventory(INVENTORY))
    driver.up()
    yield driver
    driver.down()


def test_exit_time_and_previous_logs_come_from_the_container_status(
    lab: KubernetesLab, core: Any
) -> None:
    # no previous container yet: the kubelet's 400, which the driver reads as "none"
    pod = lab.states()["serving"]
    assert pod.status is NodeStatus.RUNNING and pod.last_exit is None
    sel = mf.selector(lab.inventory, "serving")
    name = core.list_namespaced_pod(lab.ns, label_selector=sel).items[0]
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log(name.metadata.name, lab.ns, previous=True)
    assert err.value.status == 400
    assert "previous terminated container" in json.loads(err.value.body)["message"]
    assert lab.logs("serving", LogSource.PREVIOUS) == []

    before = lab.config("serving")
    args = list(before.args)
    args[args.index("--max-model-len") + 1] = "131072"
    change = planning.service_links(lab, "serving", "vllm", 8000, False)  # a no-op change
    assert change.after == before
    from runner.labs.base import Change

    bad = Change(
        kind=ChangeKind.NODE_CONFIG,
        node="serving",
        before=before,
        after=NodeConfig(args=tuple(args), env=before.env, service_links=before.service_links),
    )
    lab.apply(bad)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = lab.states()["serving"]
            if st.status is NodeStatus.CRASH_LOOPING and st.restarts >= 1:
                break
            lab.wait_events(lab.last_event_seq(), 1)
        assert st.status is NodeStatus.CRASH_LOOPING, st
        assert st.last_exit is not None and st.last_exit.code == 1
        pods = core.list_namespaced_pod(lab.ns, label_selector=sel).items
        live = next(p for p in pods if p.metadata.deletion_timestamp is None)
        term = live.status.container_statuses[0].last_state.terminated
        # whole seconds from the kubelet, refined by the last log line inside that second
        assert term.finished_at.timestamp() <= st.last_exit.finished_at.timestamp()
        assert st.last_exit.finished_at.timestamp() < term.finished_at.timestamp() + 1
        logs = lab.logs("serving", LogSource.PREVIOUS)
        assert any("max_model_len" in ln.text for ln in logs)
    finally:
        lab.apply(bad.towards(before, lab.config("serving"), "test undo"))
    from runner.labs import wait_all_ready

    wait_all_ready(lab, 30)
    assert lab.leftovers() == []


def test_a_namespace_that_is_not_a_lab_is_refused(
    server: RealCluster, state: Path, tmp_path: Path, core: Any
) -> None:
    inv = variant(tmp_path, **{"namespace: gameday-lab": "namespace: default"})
    # the API server's own Service `kubernetes` is there from the start
    before = [s.metadata.name for s in core.list_namespaced_service("default").items]
    r = gd(state, "lab", "up", "--lab", str(inv))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "namespace 'default' is not a lab namespace" in r.stderr
    assert "gameday.io/lab" in r.stderr and "Traceback" not in r.stderr
    after = [s.metadata.name for s in core.list_namespaced_service("default").items]
    assert after == before  # nothing created there


def test_an_override_acts_in_it_and_deletes_only_what_it_created(
    server: RealCluster, state: Path, tmp_path: Path, core: Any
) -> None:
    core.create_namespace({"metadata": {"name": "shared-staging"}})
    core.create_namespaced_service(
        "shared-staging",
        {"metadata": {"name": "theirs"}, "spec": {"ports": [{"port": 80}]}},
    )
    inv = variant(tmp_path, **{"namespace: gameday-lab": "namespace: shared-staging"})
    allow = {"GAMEDAY_ALLOW_NAMESPACE": "shared-staging"}
    up = gd(state, "lab", "up", "--lab", str(inv), **allow)
    assert up.returncode == 0, up.stderr
    down = gd(state, "lab", "down", "--lab", str(inv), **allow)
    assert down.returncode == 0, down.stderr
    left = [s.metadata.name for s in core.list_namespaced_service("shared-staging").items]
    assert left == ["theirs"]  # its own Service and Deployment gone, theirs and the namespace kept
    assert core.read_namespace("shared-staging").metadata.name == "shared-staging"


def test_lab_down_leaves_nothing(server: RealCluster, state: Path, core: Any) -> None:
    assert gd(state, "lab", "up", "--lab", str(INVENTORY)).returncode == 0
    assert gd(state, "lab", "down", "--lab", str(INVENTORY)).returncode == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if "gameday-lab" not in [n.metadata.name for n in core.list_namespace().items]:
            break
        time.sleep(0.1)
    assert "gameday-lab" not in [n.metadata.name for n in core.list_namespace().items]


def test_an_unreachable_api_server_or_missing_kubeconfig_is_one_clear_message(
    state: Path, tmp_path: Path
) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "gameday-testserver", "context": {"cluster": "c", "user": "u"}}
                ],
                "current-context": "gameday-testserver",
            }
        )
    )
    inv = variant(tmp_path, **{str(KUBECONFIG): str(kc)})
    r = gd(state, "lab", "up", "--lab", str(inv), timeout=120)
    assert r.returncode == 3, r.stderr
    assert "not reachable" in r.stderr and "Traceback" not in r.stderr
    missing = variant(tmp_path, **{str(KUBECONFIG): str(tmp_path / "nope")})
    r = gd(state, "lab", "up", "--lab", str(missing))
    assert r.returncode == 2 and "does not exist" in r.stderr, r.stderr


# ---- manifests against the Kubernetes schemas ----------------------------------------------


def kubernetes_inventories() -> list[Path]:
    return [
        p
        for p in sorted((ROOT / "inventories").glob("*.yaml"))
        if load_inventory(p).lab.kind is LabKind.KUBERNETES
    ]


def test_every_shipped_or_generated_manifest_validates() -> None:
    invs = kubernetes_inventories()
    assert {p.name for p in invs} >= {"eks.yaml", "kind.yaml", "kube-testserver.yaml"}
    checked = 0
    for p in invs:
        inv = load_inventory(p)
        docs = lab_objects.all_manifests(inv)
        # and the variants the driver applies: service links on, other args and env
        for n in inv.nodes:
            base = mf.baseline_config(inv, n)
            docs.append(
                mf.deployment(
                    inv,
                    n,
                    NodeConfig(args=(*base.args, "--x"), env={"A": "1"}, service_links=True),
                )
            )
        for doc in docs:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            checked += 1
    for f in sorted((ROOT / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
                checked += 1
    assert checked >= 9


def test_the_schema_check_can_fail() -> None:
    doc = mf.deployment(load_inventory(INVENTORY), load_inventory(INVENTORY).nodes[0])
    doc["spec"]["strategy"] = {"type": "Recreate", "rollingUpdat": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_shipped_baseline_is_what_lab_manifests_prints() -> None:
    r = gameday("lab", "manifests", "--lab", str(ROOT / "inventories" / "eks.yaml"))
    assert r.returncode == 0, r.stderr
    shipped = (ROOT / "k8s" / "eks-baseline.yaml").read_text()
    assert list(yaml.safe_load_all(r.stdout)) == list(yaml.safe_load_all(shipped))


def test_the_cli_exits_cleanly_with_the_watch_open(server: RealCluster, state: Path) -> None:
    # the watch thread is stopped before the interpreter exits (a read still in flight during
    # finalisation aborts the process, exit 134)
    assert gd(state, "lab", "up", "--lab", str(INVENTORY)).returncode == 0
    try:
        for _ in range(8):
            r = gd(state, "lab", "status", "--lab", str(INVENTORY))
            assert r.returncode == 0, (r.returncode, r.stderr)
            assert "serving" in r.stdout and "ready=True" in r.stdout
    finally:
        ok(gd(state, "lab", "down", "--lab", str(INVENTORY)))


GROUP = """
    tp_group:
      vars:
        gameday_gpu: {type: a10g, count: 1}
        gameday_restart: always
        gameday_port: 8000
        gameday_engine_env: {VLLM_WORKER_MULTIPROC_METHOD: spawn}
      children:
        head:
          hosts:
            node1:
              gameday_role: head
              gameday_address: 0.0.0.0
              gameday_engine_args: [Qwen/Qwen2.5-14B-Instruct-AWQ, --tensor-parallel-size, "4",
                --nnodes, "4", --node-rank, "0",
                --master-addr, node1-0.tp-group.gameday-lab.svc.cluster.local,
                --master-port, "29501", --gpu-memory-utilization, "0.92", --max-model-len, "4096",
                --host, "{address}", --port, "{port}"]
        worker:
          hosts:
""" + "".join(
    f"""            node{r + 1}:
              gameday_role: worker
              gameday_address: 0.0.0.0
              gameday_engine_args: [Qwen/Qwen2.5-14B-Instruct-AWQ, --tensor-parallel-size, "4",
                --nnodes, "4", --node-rank, "{r}",
                --master-addr, node1-0.tp-group.gameday-lab.svc.cluster.local,
                --master-port, "29501", --gpu-memory-utilization, "0.92", --max-model-len, "4096",
                --headless]
"""
    for r in (1, 2, 3)
)


def group_inventory(tmp_path: Path) -> Path:
    inv = variant(tmp_path)
    # the shipped inventory's own group replaced by this one
    own = inv.read_text().split("    # seeds/000's 4-node tensor-parallel group")[0]
    inv.write_text(own + GROUP)
    return inv


def test_a_tensor_parallel_group_runs_as_statefulsets(
    server: RealCluster, state: Path, tmp_path: Path, core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(state))
    inv = load_inventory(group_inventory(tmp_path))
    for doc in lab_objects.all_manifests(inv):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    lab = KubernetesLab(inv)
    lab.up()  # all five ready: the group formed over the head's stable DNS name
    try:
        pods = core.list_namespaced_pod(lab.ns, label_selector=mf.selector(inv)).items
        names = sorted(p.metadata.name for p in pods)
        assert names[:4] == ["node1-0", "node2-0", "node3-0", "node4-0"], names
        import httpx

        health = httpx.get(lab.url("node1") + "/health", timeout=5)
        assert health.status_code == 200
        # the runbook's fix: restart the whole group at once; the same pod names come back
        from runner.labs import wait_all_ready

        lab.restart(["node1", "node2", "node3", "node4"])
        states = wait_all_ready(lab, 60)
        assert all(s.ready for s in states.values())
        assert {s.generation for n, s in states.items() if n != "serving"} == {2}
    finally:
        lab.down()
    assert lab.leftover_objects() == []


def test_a_drill_where_a_person_fixes_the_deployment_through_the_api(
    server: RealCluster, state: Path, tmp_path: Path
) -> None:
    """A drill on Kubernetes: the person puts the Deployment right with the API directly (as
    `kubectl edit` does), not through gameday; the drill sees the configuration change, matches
    it to the scenario's fix, and records the recovery."""
    import os
    import subprocess
    import sys

    from runner.drill.bus import read_status
    from runner.drill.model import DrillPhase

    reports = tmp_path / "reports"
    args = ["drill", "tp-mismatch", "--no-page", "--lab", str(INVENTORY), "--reports", str(reports)]
    with (tmp_path / "drill.log").open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", *args, "--timeout", "300"],
            cwd=ROOT,
            env=os.environ | {"GAMEDAY_STATE_DIR": str(state)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    folder = state / "kube-testserver" / "drill"
    try:
        deadline = time.monotonic() + 300
        while (st := read_status(folder)) is None or st.phase is not DrillPhase.HANDED_OVER:
            assert proc.poll() is None, (tmp_path / "drill.log").read_text()[-3000:]
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        apps = client.AppsV1Api(config.new_client_from_config(config_file=str(KUBECONFIG)))
        d = apps.read_namespaced_deployment("serving", "gameday-lab")
        args = d.spec.template.spec.containers[0].args
        i = args.index("--tensor-parallel-size")
        # a patch of the args alone: a replace of what was read would carry a resourceVersion
        # the controller's status updates may have moved on meanwhile (409 Conflict)
        patch = [
            {
                "op": "replace",
                "path": "/spec/template/spec/containers/0/args",
                "value": args[:i] + args[i + 2 :],
            }
        ]
        apps.patch_namespaced_deployment("serving", "gameday-lab", patch)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
    assert proc.returncode == 0, (tmp_path / "drill.log").read_text()[-3000:]
    [run_dir] = [d for d in reports.iterdir() if not d.is_symlink()]  # and `latest`
    [s] = json.loads((run_dir / "result.json").read_text())["scenarios"]
    drill = s["drill"]
    assert drill["outcome"] == "recovered"
    changes = [a for a in drill["actions"] if a["kind"] == "config_change"]
    assert [(a["nodes"], a["step"], a["shortcut"]) for a in changes] == [
        (
            ["serving"],
            "Tensor-parallel size back to the GPUs the pod has (re-apply the baseline)",
            False,
        )
    ]
    # the kubelet's own restarts of the crash loop are not the person's; one the watch reports
    # before the exit it follows can still be taken for a restart (no shortcut is flagged)
    assert {a["kind"] for a in drill["actions"]} <= {"config_change", "restart"}
    assert drill["shortcuts"] == []


def test_stray_gpu_process_where_the_group_is_pinned_to_its_nodes(
    server: RealCluster, state: Path, tmp_path: Path
) -> None:
    """The scenario's shortcut (disable DeepGEMM, restart the group) must not restore: the
    stranger still holds the head's GPU. That holds where the restarted head comes back to its
    node. Unpinned, the real scheduler may score the stranger's node as the more allocated one
    and place the new head on another free GPU node, where the restart does restore."""
    inv = pinned_inventory(tmp_path, KUBECONFIG)
    files = [str(ROOT / "scenarios" / "stray-gpu-process.yaml")]
    r = gd(state, "run", *files, "--lab", str(inv), "--reports", str(tmp_path), "--json")
    assert r.stdout, r.stderr[-3000:]
    gpu: dict[str, Any] = json.loads(r.stdout)["scenarios"][0]
    failed = [a for a in gpu["assertions"] if a["verdict"] != "passed"]
    assert r.returncode == 0, json.dumps(failed, indent=1) + r.stderr[-2000:]
    timeline = " | ".join(e["event"] for e in gpu["timeline"])
    assert "node1: omniparser holds GPU memory" in timeline
    shortcut = [a for a in gpu["assertions"] if a["name"].startswith("recover 1")]
    assert shortcut and all(a["verdict"] == "passed" for a in shortcut), shortcut
