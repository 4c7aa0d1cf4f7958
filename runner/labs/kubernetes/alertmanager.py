"""The Kubernetes lab's Alertmanager: a Deployment `gameday-alertmanager` and a Service of the
same name in the lab's namespace, next to Prometheus (monitoring.py), with alertmanager.yml in a
ConfigMap. Prometheus's `alerting:` section names the Service (`<name>.<namespace>.svc:9093`);
the route and the receiver are the other labs' (runner/labs/common/alertmanager_config.py):
every alert to the runner's webhook at `monitoring.receiver_listen`, which must then be an address
the cluster's pods reach (the runner's own machine, seen from the cluster). The webhook carries
the lab's receiver token (runner/labs/common/alertmanager_config.py), which Alertmanager reads
from the file `receiver-token` beside its configuration (relative paths in alertmanager.yml are
the configuration's folder): a Secret projected into the same folder as the ConfigMap, so the
ConfigMap holds no secret and `lab manifests` prints the Secret masked.

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
from runner.results.redact import MASK
from runner.spec.inventory import Inventory, Monitoring

NAME = "gameday-alertmanager"
PORT = 9093
CONFIG_DIR = "/etc/alertmanager"
TOKEN_SECRET = "gameday-alertmanager-receiver"  # the receiver token, key `token`
TOKEN_FILE = "receiver-token"  # beside alertmanager.yml
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
                alertmanager_config(
                    inventory,
                    webhook_url(receiver_listen(inventory)),
                    token_file=TOKEN_FILE,
                ),
                sort_keys=False,
            )
        },
    }


def token_secret(inventory: Inventory, token: str | None) -> dict[str, Any]:
    """The lab's receiver token, which Alertmanager presents to the runner's webhook; printed
    masked (None)."""
    meta = _meta(inventory) | {"name": TOKEN_SECRET}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": {"token": MASK if token is None else token},
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
            {
                "name": "config",
                "projected": {
                    "sources": [
                        {"configMap": {"name": NAME}},
                        {
                            "secret": {
                                "name": TOKEN_SECRET,
                                "items": [{"key": "token", "path": TOKEN_FILE}],
                            }
                        },
                    ]
                },
            },
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


def manifests(
    inventory: Inventory, mon: Monitoring, token: str | None = None
) -> list[dict[str, Any]]:
    """The token's Secret, the ConfigMap, Service and Deployment, in the order `lab up` applies
    them (`token` None: as printed, masked)."""
    return [
        token_secret(inventory, token),
        config_map(inventory),
        service(inventory),
        deployment(inventory, mon),
    ]
