"""The real Prometheus (Debian's /usr/bin/prometheus) as a pod of the stand-in: its config and
token from a ConfigMap and a Secret volume, its listen address the pod IP, and the stand-in's
HTTP service discovery (Debian's build has no kubernetes_sd) finding an engine pod's port with
the labels role `pod` gives."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from tests.integration.kubeapi.conftest import deployment, running_pod, wait_for
from tests.kubeapi.server import Server

pytestmark = pytest.mark.kube_standin(
    "tests the stand-in's own kubelet features (test_kubelet.py has ours)"
)

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def prometheus_pod(url: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "prometheus", "labels": {"app": "prometheus"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {
                    "name": "config",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": "prometheus"}},
                            {"secret": {"name": "prometheus-token"}},
                        ]
                    },
                },
                {"name": "data", "emptyDir": {}},
            ],
            "containers": [
                {
                    "name": "prometheus",
                    "image": "prom/prometheus",
                    "command": [PROMETHEUS],
                    "args": [
                        "--config.file=/etc/prometheus/prometheus.yml",
                        "--storage.tsdb.path=/prometheus",
                        "--web.listen-address=0.0.0.0:9090",
                    ],
                    "ports": [{"name": "web", "containerPort": 9090}],
                    "volumeMounts": [
                        {"name": "config", "mountPath": "/etc/prometheus"},
                        {"name": "data", "mountPath": "/prometheus"},
                    ],
                }
            ],
        },
    }


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="prometheus is not installed")
def test_prometheus_pod_discovers_an_engine_pod(server: Server, core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "lab"}})
    apps = client.AppsV1Api(core.api_client)
    engine = deployment(
        "engine", ["sleep", "600"], ports=[{"name": "metrics", "containerPort": 9400}]
    )
    apps.create_namespaced_deployment("lab", engine)
    pod = running_pod(core, "lab", "engine")
    sd = f"{server.url}/gameday/v1/http-sd/namespaces/lab/pods"
    # `type: Bearer` is spelt out: this Prometheus's http_sd sends the bare credentials without it
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "pods",
                "http_sd_configs": [
                    {
                        "url": sd,
                        "refresh_interval": "1s",
                        "authorization": {"type": "Bearer", "credentials_file": "token"},
                    }
                ],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_app"],
                        "regex": "engine",
                        "action": "keep",
                    },
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }
        ],
    }
    core.create_namespaced_config_map(
        "lab",
        {"metadata": {"name": "prometheus"}, "data": {"prometheus.yml": yaml.safe_dump(config)}},
    )
    core.create_namespaced_secret(
        "lab", {"metadata": {"name": "prometheus-token"}, "stringData": {"token": server.token}}
    )
    core.create_namespaced_pod("lab", prometheus_pod(server.url))
    prom_ip = running_pod(core, "lab", "prometheus").status.pod_ip

    def targets() -> list[dict[str, Any]]:
        try:
            r = httpx.get(f"http://{prom_ip}:9090/api/v1/targets", timeout=2)
        except httpx.HTTPError:
            return []
        if r.status_code != 200:  # 503 while Prometheus starts
            return []
        return list(r.json()["data"]["activeTargets"])

    found = wait_for(targets, timeout=60)
    assert [t["labels"] for t in found] == [
        {"instance": f"{pod.status.pod_ip}:9400", "job": "pods", "pod": pod.metadata.name}
    ]
    discovered = found[0]["discoveredLabels"]
    assert discovered["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert discovered["__meta_kubernetes_namespace"] == "lab"
