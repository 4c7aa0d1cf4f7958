"""The Kubernetes lab's Prometheus: a Deployment `gameday-prometheus` in the lab's namespace,
its configuration and the DeepGEMM crash write-up's alert rules in a ConfigMap, and the service
account, Role and RoleBinding that let it list and watch the namespace's pods. Its alerts go to
the lab's Alertmanager (alertmanager.py: a Deployment and Service beside it).

Prometheus finds the engines through the API (`kubernetes_sd_configs`, role pod, the lab's
namespace named, never `own_namespace`) and keeps only the lab's serving and head pods on the
engine port, labelled `node=<inventory node>`: `up{job="vllm"}` and `ServingDown` mean what they
mean on the other labs. A pod that is gone is a target that is gone, which `ServingDown` counts
as down (`absent(...)`).

On a real cluster Prometheus authenticates with its service account (in-cluster config). With
`monitoring.api_server` (the test server, which runs Prometheus as a process beside the API
server) the configuration names that server (`kubeconfig`: the kubeconfig's, wherever the test
server listens) and reads a bearer token from the file `token` beside it: the Secret
`gameday-prometheus-api`, holding the kubeconfig's token, is projected into the same directory as
the ConfigMap. Paths in the configuration are relative to it. Printed (`gameday lab manifests`),
the token is masked and a `kubeconfig` server is a placeholder: `lab up` fills both in.

Every object carries the lab's labels, so `lab down` deletes it with the rest; none carries the
node label, so the driver's pod watch does not take Prometheus for an engine.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from runner.errors import InventoryError, LabError
from runner.labs.base import PartDeath, PartDied
from runner.labs.common import alertmanager_config as am_config
from runner.labs.common import prometheus_config as prom
from runner.labs.kubernetes import alertmanager as am
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes.api import KubeApi
from runner.results.redact import MASK
from runner.spec.inventory import Inventory, Monitoring, Node, Role

NAME = "gameday-prometheus"
API_SECRET = "gameday-prometheus-api"
PORT = 9090
CONFIG_DIR = "/etc/prometheus"
DATA_DIR = "/prometheus"
APP_LABEL = "app.kubernetes.io/name"
UNRESOLVED_SERVER = "<the kubeconfig's server>"
RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}

# The meta labels kubernetes_sd_configs gives a pod target: a pod label's name with every
# character outside [a-zA-Z0-9_] as `_`.
_POD_LABEL = "__meta_kubernetes_pod_label_"


def _meta(label: str) -> str:
    return _POD_LABEL + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def labels(inventory: Inventory) -> dict[str, str]:
    """The lab's labels (what `lab down` deletes by) and the app's name; no node label."""
    return mf.labels(inventory) | {APP_LABEL: NAME}


def selector(inventory: Inventory) -> str:
    """The label selector of the Prometheus pod."""
    return f"{mf.LAB_LABEL}={inventory.lab.name},{APP_LABEL}={NAME}"


def _meta_of(inventory: Inventory, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": mf.spec_of(inventory).namespace, "labels": labels(inventory)}


@dataclass(frozen=True)
class ApiServer:
    """The API server Prometheus discovers pods through (`monitoring.api_server`), resolved."""

    url: str
    token: str


def _api_server(mon: Monitoring, api: ApiServer | None) -> str | None:
    if mon.api_server is None:
        return None
    if api is not None:
        return api.url
    return UNRESOLVED_SERVER if mon.api_server == "kubeconfig" else mon.api_server


def scrape_config(
    inventory: Inventory, mon: Monitoring, api: ApiServer | None = None
) -> dict[str, Any]:
    """Job `vllm`: the lab's serving and head pods, on each one's engine port, `node` labelled.
    A node with a command of its own (a proxy) is no engine and has no vLLM metrics."""
    ns = mf.spec_of(inventory).namespace
    engines = _engines(inventory)
    keep = "|".join(f"{re.escape(n.name)};{n.port}" for n in engines)
    sd: dict[str, Any] = {
        "role": "pod",
        "namespaces": {"names": [ns]},
        "selectors": [{"role": "pod", "label": f"{mf.LAB_LABEL}={inventory.lab.name}"}],
    }
    server = _api_server(mon, api)
    if server:
        # the type spelt out: the test server hands this to HTTP discovery, which has no default
        sd = {
            "api_server": server,
            "authorization": {"type": "Bearer", "credentials_file": "token"},
            **sd,
        }
    return {
        "job_name": "vllm",
        "kubernetes_sd_configs": [sd],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "regex": mf.CONTAINER,
                "action": "keep",
            },
            {
                "source_labels": [
                    _meta(mf.NODE_LABEL),
                    "__meta_kubernetes_pod_container_port_number",
                ],
                "separator": ";",
                "regex": keep or "^$",
                "action": "keep",
            },
            {"source_labels": [_meta(mf.NODE_LABEL)], "target_label": "node"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        ],
    }


def prometheus_yml(
    inventory: Inventory, mon: Monitoring, api: ApiServer | None = None
) -> dict[str, Any]:
    interval = prom.scrape_interval(mon, inventory.lab.time_scale)
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": interval,
            "external_labels": prom.external_labels(inventory),
        },
        "rule_files": ["rules.yml"],  # relative to this file, in the same volume
        "alerting": am_config.prometheus_alerting(am.target(inventory)),
        "scrape_configs": [scrape_config(inventory, mon, api)],
    }


def config_map(
    inventory: Inventory, mon: Monitoring, api: ApiServer | None = None
) -> dict[str, Any]:
    rules = prom.rule_groups(mon, inventory.lab.time_scale)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta_of(inventory, NAME),
        "data": {
            "prometheus.yml": yaml.safe_dump(prometheus_yml(inventory, mon, api), sort_keys=False),
            "rules.yml": yaml.safe_dump(rules, sort_keys=False),
        },
    }


def api_secret(inventory: Inventory, token: str | None) -> dict[str, Any]:
    """The token Prometheus presents to `monitoring.api_server`; printed masked (None)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta_of(inventory, API_SECRET),
        "type": "Opaque",
        "stringData": {"token": MASK if token is None else token},
    }


def service_account(inventory: Inventory) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta_of(inventory, NAME)}


def role(inventory: Inventory) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta_of(inventory, NAME),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }


def role_binding(inventory: Inventory) -> dict[str, Any]:
    ns = mf.spec_of(inventory).namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta_of(inventory, NAME),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}],
    }


def _config_volume(mon: Monitoring) -> dict[str, Any]:
    sources: list[dict[str, Any]] = [{"configMap": {"name": NAME}}]
    if mon.api_server:
        sources.append(
            {"secret": {"name": API_SECRET, "items": [{"key": "token", "path": "token"}]}}
        )
    return {"name": "config", "projected": {"sources": sources}}


def deployment(inventory: Inventory, mon: Monitoring) -> dict[str, Any]:
    spec = mf.spec_of(inventory)
    container = {
        "name": "prometheus",
        "image": mon.image,
        "imagePullPolicy": "IfNotPresent",
        "command": [mon.prometheus_command],
        "args": [
            f"--config.file={CONFIG_DIR}/prometheus.yml",
            f"--storage.tsdb.path={DATA_DIR}",
            "--web.enable-lifecycle",
            f"--web.listen-address=0.0.0.0:{PORT}",
            f"--rules.alert.resend-delay={am_config.resend_delay(inventory)}",
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
        "serviceAccountName": NAME,
        "containers": [container],
        "volumes": [_config_volume(mon), {"name": "data", "emptyDir": {}}],
    }
    if spec.gpu is not None:  # allowed on the GPU nodes too (a cluster may have no others)
        pod["tolerations"] = [dict(t) for t in spec.gpu.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta_of(inventory, NAME),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one TSDB directory, one writer
            "selector": {"matchLabels": {mf.LAB_LABEL: inventory.lab.name, APP_LABEL: NAME}},
            "template": {"metadata": {"labels": labels(inventory)}, "spec": pod},
        },
    }


def manifests(
    inventory: Inventory, api: ApiServer | None = None, receiver_token: str | None = None
) -> list[dict[str, Any]]:
    """What `lab up` applies for the inventory's monitoring, in order (none without it). `api`:
    `monitoring.api_server` resolved, `receiver_token` the lab's (None: as printed, the tokens
    masked)."""
    mon = inventory.lab.monitoring
    if mon is None:
        return []
    secret = [api_secret(inventory, api.token if api else None)] if mon.api_server else []
    return [
        service_account(inventory),
        role(inventory),
        role_binding(inventory),
        *secret,
        config_map(inventory, mon, api),
        *am.manifests(inventory, mon, receiver_token),
        deployment(inventory, mon),
    ]


def engine_targets(inventory: Inventory, pod_ips: dict[str, str | None]) -> set[str]:
    """The scrape URLs Prometheus reports for the serving and head pods at `pod_ips`. A pod
    without an IP yet is a target no Prometheus reports, so a wait for this set goes on."""
    return {
        f"http://{ip}:{n.port}/metrics" if (ip := pod_ips.get(n.name)) else f"{n.name}: no pod IP"
        for n in _engines(inventory)
    }


def _engines(inventory: Inventory) -> list[Node]:
    """The serving and head nodes that run the engine command."""
    return [n for n in inventory.nodes if n.role in (Role.SERVING, Role.HEAD) and n.command is None]


# ---- on the API --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Calls:
    what: str  # as leftover_objects names it
    read: Callable[..., Any]
    create: Callable[..., Any]
    replace: Callable[..., Any]
    list: Callable[..., Any]
    delete: Callable[..., Any]


def _calls(kube: KubeApi) -> dict[str, _Calls]:
    """The API calls of each kind this module applies; the Deployment last (the driver lists and
    deletes the lab's Deployments and pods itself)."""
    from kubernetes import client

    core, apps = kube.core, kube.apps
    rbac = client.RbacAuthorizationV1Api(kube.client)

    def of(what: str, api: Any, suffix: str) -> _Calls:
        return _Calls(
            what,
            getattr(api, f"read_namespaced_{suffix}"),
            getattr(api, f"create_namespaced_{suffix}"),
            getattr(api, f"replace_namespaced_{suffix}"),
            getattr(api, f"list_namespaced_{suffix}"),
            getattr(api, f"delete_namespaced_{suffix}"),
        )

    return {
        "ServiceAccount": of("serviceaccount", core, "service_account"),
        "Role": of("role", rbac, "role"),
        "RoleBinding": of("rolebinding", rbac, "role_binding"),
        "Secret": of("secret", core, "secret"),
        "ConfigMap": of("configmap", core, "config_map"),
        "Service": of("service", core, "service"),
        "Deployment": of("deployment", apps, "deployment"),
    }


def kubeconfig_token(kube: KubeApi, inventory: Inventory) -> str:
    """The bearer token of the kubeconfig's user, which Prometheus presents to `api_server`."""
    keys = kube.client.configuration.api_key  # the key's name differs by client version
    auth = keys.get("BearerToken") or keys.get("authorization") or ""
    scheme, _, token = str(auth).partition(" ")
    if scheme != "Bearer" or not token:
        raise InventoryError(
            "monitoring.api_server needs a kubeconfig user with a token, for Prometheus to "
            "present to that server",
            file=inventory.path,
            field="all.vars.gameday_lab.monitoring.api_server",
            hint="leave api_server out on a real cluster: Prometheus then uses its service account",
        )
    return token


def apply(kube: KubeApi, inventory: Inventory, receiver_token: str | None = None) -> None:
    """Create or replace the monitoring objects (none without `gameday_lab.monitoring`), with
    the lab's receiver token in Alertmanager's Secret."""
    mon = inventory.lab.monitoring
    if mon is None:
        return
    api = None
    if mon.api_server:
        url = kube.client.configuration.host if mon.api_server == "kubeconfig" else mon.api_server
        api = ApiServer(url=url, token=kubeconfig_token(kube, inventory))
    calls = _calls(kube)
    for doc in manifests(inventory, api, receiver_token):
        c, name = calls[doc["kind"]], doc["metadata"]["name"]
        status, _ = kube.status_of(c.read, name, kube.ns)
        if status == 404:
            kube.call(f"create {c.what} {name}", c.create, kube.ns, doc)
        elif doc["kind"] == "Service":
            continue  # as the lab's own Services: created once (a PUT must carry its clusterIP)
        else:
            kube.call(f"replace {c.what} {name}", c.replace, name, kube.ns, doc)


def _supporting(kube: KubeApi, inventory: Inventory) -> list[tuple[_Calls, str]]:
    """Each kind but the Deployments (the driver deletes those and Services by the lab's label),
    with the selector of Prometheus's and of Alertmanager's objects."""
    return [
        (c, sel)
        for kind, c in _calls(kube).items()
        if kind not in ("Deployment", "Service")
        for sel in (selector(inventory), am.selector(inventory))
    ]


def delete(kube: KubeApi, inventory: Inventory) -> None:
    """Delete the monitoring objects but the Deployments and Services, by their labels."""
    for c, sel in _supporting(kube, inventory):
        for o in kube.call(f"list {c.what}s", c.list, kube.ns, label_selector=sel).items:
            kube.delete(c.delete, o.metadata.name)


def leftovers(kube: KubeApi, inventory: Inventory) -> list[str]:
    """The monitoring objects but the Deployments, Services and pods that exist now."""
    return [
        f"{c.what} {o.metadata.name}"
        for c, sel in _supporting(kube, inventory)
        for o in kube.call(f"list {c.what}s", c.list, kube.ns, label_selector=sel).items
    ]


def pod_url(kube: KubeApi, inventory: Inventory) -> str | None:
    """The URL of the Prometheus pod that has an IP and is not being deleted (None: none yet)."""
    pods = kube.call(
        "list pods", kube.core.list_namespaced_pod, kube.ns, label_selector=selector(inventory)
    ).items
    for p in pods:
        ip = p.status.pod_ip if p.status else None
        if ip and p.metadata.deletion_timestamp is None:
            return f"http://{ip}:{PORT}"
    return None


def wait_scraped(
    find_url: Callable[[], str | None],
    want: Callable[[], set[str]],
    timeout_s: float,
    hint: str,
    dead: Callable[[], PartDeath | None] = lambda: None,
) -> None:
    """Until Prometheus is found (`find_url`: None while its pod has no IP) and has scraped the
    targets `want()` names, each once; LabError after `timeout_s`, PartDied as soon as `dead`
    (the lab's `dead_part`) names a monitoring pod that died."""
    deadline = time.monotonic() + timeout_s
    while (url := find_url()) is None:
        if (death := dead()) is not None:
            raise PartDied(death)
        if time.monotonic() > deadline:
            raise LabError(
                f"the lab's Prometheus pod had no IP within {timeout_s:.0f} s", hint=hint
            )
        time.sleep(0.2)
    prom.wait_targets(url, want, max(deadline - time.monotonic(), 0.0), hint, dead)
