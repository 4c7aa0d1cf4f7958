"""The Kubernetes lab's Alertmanager: a Deployment `gameday-alertmanager` and a Service of the
same name in the lab's namespace, next to Prometheus (monitoring.py), with alertmanager.yml in a
ConfigMap. Prometheus's `alerting:` section names the Service (`<name>.<namespace>.svc:9093`);
the route and the receiver are the other labs' (runner/labs/common/alertmanager_config.py):
every alert to the runner's webhook at `monitoring.receiver_listen`, which must then be an address
the cluster's pods reach (the runner's own machine, seen from the cluster).

The container runs `monitoring.alertmanager_command` (default `alertmanager`, the binary of the
`prom/alertmanager` image; Debian names it `prometheus-alertmanager`) with no cluster port: one
replica, no gossip. Its objects carry the lab's labels and no node label, like Prometheus's.
"""

from __future__ import annotations

from typing import Any

import yaml

from runner.labs.common.alertmanager_config import (
    alertmanager_config,
    receiver_listen,
    webhook_url,
)
from runner.labs.kubernetes import manifests as mf
from runner.spec.inventory import Inventory, Monitoring

NAME = "gameday-alertmanager"
PORT = 9093
CONFIG_DIR = "/etc/alertmanager"
DATA_DIR = "/alertmanager"
APP_LABEL = "app.kubernetes.io/name"
# The prom/alertmanager image's binary; a lab that runs Debian's sets alertmanager_command.
DEFAULT_COMMAND = "alertmanager"
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}


def labels(inventory: Inventory) -> dict[str, str]:
    return mf.labels(inventory) | {APP_LABEL: NAME}


def selector(inventory: Inventory) -> str:
    """The label selector of the Alertmanager's objects."""
    return f"{mf.LAB_LABEL}={inventory.lab.name},{APP_LABEL}={NAME}"


def target(inventory: Inventory) -> str:
    """host:port Prometheus sends its alerts to: the Service's cluster DNS name."""
    return f"{NAME}.{mf.spec_of(inventory).namespace}.svc:{PORT}"


def _meta(inventory: Inventory) -> dict[str, Any]:
    return {"name": NAME, "namespace": mf.spec_of(inventory).namespace, "labels": labels(inventory)}


def config_map(inventory: Inventory) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(inventory),
        "data": {
            "alertmanager.yml": yaml.safe_dump(
                alertmanager_config(inventory, webhook_url(receiver_listen(inventory))),
                sort_keys=False,
            )
        },
    }


def service(inventory: Inventory) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(inventory),
        "spec": {
            "selector": {mf.LAB_LABEL: inventory.lab.name, APP_LABEL: NAME},
            "ports": [{"name": "web", "port": PORT, "targetPort": "web", "protocol": "TCP"}],
        },
    }


def deployment(inventory: Inventory, mon: Monitoring) -> dict[str, Any]:
    container = {
        "name": "alertmanager",
        "image": mon.alertmanager_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [mon.alertmanager_command or DEFAULT_COMMAND],
        "args": [
            f"--config.file={CONFIG_DIR}/alertmanager.yml",
            f"--storage.path={DATA_DIR}",
            f"--web.listen-address=0.0.0.0:{PORT}",
            "--cluster.listen-address=",
        ],
        "ports": [{"name": "web", "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/-/ready", "port": "web"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": RESOURCES,
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
        ],
    }
    pod: dict[str, Any] = {
        "containers": [container],
        "volumes": [
            {"name": "config", "configMap": {"name": NAME}},
            {"name": "data", "emptyDir": {}},
        ],
    }
    gpu = mf.spec_of(inventory).gpu
    if gpu is not None:  # allowed on the GPU nodes too (a cluster may have no others)
        pod["tolerations"] = [dict(t) for t in gpu.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(inventory),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one notification log, one writer
            "selector": {"matchLabels": {mf.LAB_LABEL: inventory.lab.name, APP_LABEL: NAME}},
            "template": {"metadata": {"labels": labels(inventory)}, "spec": pod},
        },
    }


def manifests(inventory: Inventory, mon: Monitoring) -> list[dict[str, Any]]:
    """The ConfigMap, Service and Deployment, in the order `lab up` applies them."""
    return [config_map(inventory), service(inventory), deployment(inventory, mon)]
