"""Prometheus HTTP service discovery of a namespace's pods, the stand-in's own endpoint
(`GET /gameday/v1/http-sd/namespaces/{ns}/pods`, bearer token as for the API).

Debian's Prometheus is built without Kubernetes service discovery (no client-go), so on the
stand-in the lab's Prometheus finds pods through `http_sd_configs` instead of
`kubernetes_sd_configs: [{role: pod}]`. The target groups carry exactly the `__address__` and
`__meta_kubernetes_*` labels that role `pod` gives (discovery/kubernetes/pod.go), so relabelling
is the same on both.
"""

from __future__ import annotations

import re
from typing import Any

PATH = re.compile(r"^/gameday/v1/http-sd/namespaces/(?P<ns>[^/]+)/pods$")


def sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_labels(p: dict[str, Any]) -> dict[str, str]:
    meta, status = p["metadata"], p.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    out = {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_ip": status.get("podIP", ""),
        "__meta_kubernetes_pod_ready": "true" if ready else "false",
        "__meta_kubernetes_pod_phase": status.get("phase", ""),
        "__meta_kubernetes_pod_node_name": p["spec"].get("nodeName", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_uid": meta["uid"],
    }
    for kind, values in (("label", meta.get("labels")), ("annotation", meta.get("annotations"))):
        for k, v in (values or {}).items():
            out[f"__meta_kubernetes_pod_{kind}_{sanitize(k)}"] = str(v)
            out[f"__meta_kubernetes_pod_{kind}present_{sanitize(k)}"] = "true"
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner:
        out["__meta_kubernetes_pod_controller_kind"] = owner["kind"]
        out["__meta_kubernetes_pod_controller_name"] = owner["name"]
    return out


def target_groups(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One group per pod with an IP, one target per container port (a container without ports
    is one target at the pod IP), as role `pod` builds them."""
    groups = []
    for p in pods:
        ip = (p.get("status") or {}).get("podIP")
        if not ip:
            continue
        base = pod_labels(p)
        for c in p["spec"].get("containers") or []:
            cl = base | {
                "__meta_kubernetes_pod_container_name": c["name"],
                "__meta_kubernetes_pod_container_image": c.get("image", ""),
                "__meta_kubernetes_pod_container_init": "false",
            }
            ports = c.get("ports") or []
            if not ports:
                groups.append({"targets": [ip], "labels": cl})
            for pt in ports:
                port = str(pt["containerPort"])
                labels = cl | {
                    "__meta_kubernetes_pod_container_port_name": pt.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": port,
                    "__meta_kubernetes_pod_container_port_protocol": pt.get("protocol", "TCP"),
                }
                groups.append({"targets": [f"{ip}:{port}"], "labels": labels})
    return groups
