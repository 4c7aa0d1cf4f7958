"""Prometheus's Kubernetes service discovery (client-go list+watch of pods) against the stand-in:
the real /usr/bin/prometheus finds a running pod's container port as a scrape target."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from tests.kubeapi.server import Server

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sleeper_deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "busybox",
                            "command": ["sleep", "600"],
                            "ports": [{"name": "metrics", "containerPort": 9400}],
                        }
                    ]
                },
            },
        },
    }


def wait_for(fn: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = fn()
        if out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s")


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus is not installed")
def test_prometheus_discovers_a_pod_through_the_stand_in(
    server: Server, core: client.CoreV1Api, tmp_path: Path
) -> None:
    core.create_namespace({"metadata": {"name": "lab"}})
    apps = client.AppsV1Api(core.api_client)
    apps.create_namespaced_deployment("lab", sleeper_deployment("engine"))
    pod = wait_for(
        lambda: next((p for p in core.list_namespaced_pod("lab").items if p.status.pod_ip), None)
    )
    conf = tmp_path / "prom"
    conf.mkdir()
    (conf / "token").write_text(server.token)
    (conf / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "pods",
                        "kubernetes_sd_configs": [
                            {
                                "role": "pod",
                                "api_server": server.url,
                                "authorization": {"credentials_file": "token"},
                                "namespaces": {"names": ["lab"]},
                            }
                        ],
                    }
                ],
            }
        )
    )
    port = free_port()
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={conf / 'prometheus.yml'}",
            f"--storage.tsdb.path={conf / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(conf / "prometheus.log").open("wb"),
    )
    try:

        def targets() -> list[dict[str, Any]]:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=2)
            except httpx.HTTPError:
                return []
            return list(r.json()["data"]["activeTargets"])

        found = wait_for(targets, timeout=60)
    finally:
        prom.terminate()
        prom.wait(10)
    assert [t["labels"] for t in found] == [
        {
            "instance": f"{pod.status.pod_ip}:9400",
            "job": "pods",
        }
    ]
    assert found[0]["discoveredLabels"]["__meta_kubernetes_pod_name"] == pod.metadata.name
    assert found[0]["discoveredLabels"]["__meta_kubernetes_pod_container_port_name"] == "metrics"
