"""The Kubernetes lab's Prometheus: on the real control plane with our kubelet, `lab up` runs it
as a pod that scrapes the serving engine, `ServingDown` fires when the engine's pod is gone, and
`lab down` leaves nothing; in a Prometheus fed the pods directly, of the lab's pods it scrapes the
serving and head engines only, each labelled with its inventory node.

The Prometheus here is Debian's, built without Kubernetes discovery: the pods' targets, with the
labels pod discovery gives them, reach it from the kubelet's HTTP service discovery (which asks
the API server with the token its configuration names), or from a file
(tests/support/kube_sd.py); everything after discovery (relabelling, rules, alerting) is the
lab's own configuration.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from runner.labs.kubernetes import alertmanager as kam
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes import monitoring as km
from runner.labs.kubernetes.driver import KubernetesLab
from runner.programs import resolve_command
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory
from tests.e2e.test_kubernetes_lab import GROUP
from tests.support import cli, kube_sd
from tests.support.cli import ROOT
from tests.support.kubecluster import RealCluster, real_cluster

pytestmark = pytest.mark.e2e
PROM = "127.0.95.100:19393"


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"vllm:num_requests_running 0\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def engines() -> Iterator[None]:
    """The serving engine's and the head's /metrics at their pods' IPs."""
    servers = [ThreadingHTTPServer((ip, 8000), _Metrics) for ip in ("127.0.95.1", "127.0.95.2")]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield
    for s in servers:
        s.shutdown()
        s.server_close()


def lab_pods(inv: Inventory) -> dict[str, dict[str, Any]]:
    """The pods the lab's workloads make, each with an IP, by inventory node (and
    `prometheus`)."""
    docs = [mf.workload(inv, n) for n in inv.nodes]
    docs.append(km.deployment(inv, inv.lab.monitoring))  # type: ignore[arg-type]
    pods = {}
    for i, d in enumerate(docs, start=1):
        tpl = d["spec"]["template"]
        name = d["metadata"]["name"]
        key = tpl["metadata"]["labels"].get(mf.NODE_LABEL, "prometheus")
        pods[key] = {
            "metadata": {
                "name": f"{name}-0" if d["kind"] == "StatefulSet" else f"{name}-7d9f8-x{i}",
                "namespace": d["metadata"]["namespace"],
                "labels": tpl["metadata"]["labels"],
                "uid": f"uid-{i}",
            },
            "spec": {**tpl["spec"], "nodeName": "gpu-1"},
            "status": {"podIP": f"127.0.95.{i}", "phase": "Running"},
        }
    return pods


def start_prometheus(tmp_path: Path, inv: Inventory) -> subprocess.Popen[bytes]:
    cm = km.config_map(inv, inv.lab.monitoring)  # type: ignore[arg-type]
    config = kube_sd.as_file_sd(yaml.safe_load(cm["data"]["prometheus.yml"]), "pods.json")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    (tmp_path / "rules.yml").write_text(cm["data"]["rules.yml"])
    program = resolve_command("prometheus")
    assert program is not None, "apt-get install -y prometheus"
    return subprocess.Popen(
        [
            program,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={PROM}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )


def poll(what: str, fn: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with httpx.Client(timeout=2) as http:
            try:
                got = fn(http)
            except httpx.HTTPError:
                got = None
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")


def active_up(base: str, n: int) -> Any:
    """Prometheus's targets once it has scraped `n` active ones, all up."""

    def targets(http: httpx.Client) -> dict[str, Any] | None:
        r = http.get(base + "/api/v1/targets")
        if r.status_code != 200:  # 503 "Service Unavailable" while Prometheus starts
            return None
        data = r.json()["data"]
        active = data["activeTargets"]
        if len(active) != n or any(t["health"] != "up" for t in active):
            return None
        return data  # type: ignore[no-any-return]

    return poll(f"{n} engines scraped", targets)


def test_prometheus_scrapes_the_serving_and_head_pods_by_node(
    tmp_path: Path, engines: None
) -> None:
    inv_path = tmp_path / "inventory.yaml"
    own = (ROOT / "inventories" / "kube-testserver.yaml").read_text()
    # the shipped inventory's own group replaced by this one
    inv_path.write_text(own.split("    # seeds/000's 4-node tensor-parallel group")[0] + GROUP)
    inv = load_inventory(inv_path)
    pods = lab_pods(inv)
    assert sorted(pods) == ["node1", "node2", "node3", "node4", "prometheus", "serving"]
    kube_sd.write_targets(tmp_path / "pods.json", list(pods.values()))
    proc = start_prometheus(tmp_path, inv)
    base = f"http://{PROM}"
    try:
        data = active_up(base, 2)
        assert sorted((t["scrapeUrl"], t["labels"]) for t in data["activeTargets"]) == [
            (
                "http://127.0.95.1:8000/metrics",
                {
                    "instance": "127.0.95.1:8000",
                    "job": "vllm",
                    "node": "serving",
                    "pod": pods["serving"]["metadata"]["name"],
                },
            ),
            (
                "http://127.0.95.2:8000/metrics",
                {"instance": "127.0.95.2:8000", "job": "vllm", "node": "node1", "pod": "node1-0"},
            ),
        ]
        # the workers (no HTTP to scrape, though their port is declared) and Prometheus itself
        dropped = sorted(
            t["discoveredLabels"]["__meta_kubernetes_pod_name"] for t in data["droppedTargets"]
        )
        assert dropped == ["gameday-prometheus-7d9f8-x6", "node2-0", "node3-0", "node4-0"]
        assert http_query(base, 'up{job="vllm"}') == {"serving": "1", "node1": "1"}
    finally:
        proc.terminate()
        proc.wait(10)


def test_serving_down_fires_when_the_serving_pod_is_gone(tmp_path: Path, engines: None) -> None:
    inv = load_inventory(cli.kube_serving_only(tmp_path))
    pods = lab_pods(inv)
    kube_sd.write_targets(tmp_path / "pods.json", list(pods.values()))
    proc = start_prometheus(tmp_path, inv)
    base = f"http://{PROM}"
    try:
        active_up(base, 1)
        assert http_query(base, 'up{job="vllm"}') == {"serving": "1"}
        # the serving Deployment scaled to 0, its pod deleted: its target is gone
        kube_sd.write_targets(tmp_path / "pods.json", [pods["prometheus"]])

        def serving_down(http: httpx.Client) -> list[dict[str, Any]]:
            alerts = http.get(base + "/api/v1/alerts").json()["data"]["alerts"]
            return [
                a
                for a in alerts
                if a["labels"]["alertname"] == "ServingDown" and a["state"] == "firing"
            ]

        firing = poll("ServingDown firing", serving_down)
        # absent(up{job="vllm"}): the series is gone, not 0 (it carries the job, no node)
        assert firing[0]["labels"] == {
            "alertname": "ServingDown",
            "job": "vllm",
            "severity": "page",
        }
        # pending for the rule's `for:` in lab time (300 s at x100) before it fired
        assert firing[0]["annotations"]["for_real_world"] == "300s"
    finally:
        proc.terminate()
        proc.wait(10)


def http_query(base: str, q: str) -> dict[str, str]:
    data = httpx.get(base + "/api/v1/query", params={"query": q}, timeout=5).json()
    return {r["metric"]["node"]: r["value"][1] for r in data["data"]["result"]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RealCluster]:
    """The real control plane and our kubelet."""
    with real_cluster(tmp_path / "kubereal", tmp_path / "kubeapi" / "kubeconfig") as cluster:
        yield cluster


def serving_down(base: str) -> Any:
    def firing(http: httpx.Client) -> list[dict[str, Any]]:
        alerts = http.get(base + "/api/v1/alerts").json()["data"]["alerts"]
        return [
            a
            for a in alerts
            if a["labels"]["alertname"] == "ServingDown" and a["state"] == "firing"
        ]

    return poll("ServingDown firing", firing)


@pytest.mark.kube_real
def test_on_the_test_server_lab_up_runs_prometheus_and_serving_down_fires(
    server: RealCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "state"))
    inv = cli.variant(
        cli.kube_serving_only(tmp_path),
        tmp_path,
        {str(ROOT / "build" / "kubeapi" / "kubeconfig"): str(tmp_path / "kubeapi" / "kubeconfig")},
    )
    lab = KubernetesLab(load_inventory(inv))
    lab.up()
    try:
        lab.monitoring_ready(60)  # Prometheus has scraped the serving pod once
        base = lab.prometheus_url()
        assert base is not None and base.startswith("http://127.0.90.") and base.endswith(":9090")
        pod_ip = lab.url("serving").removeprefix("http://").removesuffix(":8000")
        assert http_query(base, 'up{job="vllm"}') == {"serving": "1"}
        targets = httpx.get(base + "/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        assert [t["scrapeUrl"] for t in targets] == [f"http://{pod_ip}:8000/metrics"]
        pod = lab.pods.views["serving"].pod
        assert pod is not None
        # the Alertmanager beside it runs (Debian's, as a process) and answers on its pod IP
        am_pods = lab.kube.core.list_namespaced_pod(
            lab.ns, label_selector=kam.selector(lab.inventory)
        ).items
        assert [p.metadata.labels["app.kubernetes.io/name"] for p in am_pods] == [kam.NAME]

        def am_ready(http: httpx.Client) -> bool:
            (p,) = lab.kube.core.list_namespaced_pod(
                lab.ns, label_selector=kam.selector(lab.inventory)
            ).items
            ip = p.status.pod_ip if p.status else None
            return bool(ip) and http.get(f"http://{ip}:{kam.PORT}/-/ready").status_code == 200

        poll("Alertmanager ready", am_ready)
        lab.stop("serving")  # its Deployment scaled to 0, its pod deleted
        alert = {"alertname": "ServingDown", "job": "vllm", "severity": "page"}
        # the engine stops before discovery drops its target (its discovery hands changes over
        # every 5 s of wall time): `up` 0 for the rule's `for:` fires first, or else the series'
        # absence does
        assert serving_down(base)[0]["labels"] in (
            alert | {"node": "serving", "instance": f"{pod_ip}:8000", "pod": pod.metadata.name},
            alert,
        )
    finally:
        lab.down()
    assert lab.leftover_objects() == []
