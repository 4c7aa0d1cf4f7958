"""Prometheus's Kubernetes pod discovery, for a Prometheus built without it.

Debian's `prometheus` package (the one the tests run) is built without `kubernetes_sd_configs`
(its Kubernetes client is not packaged): its config loader rejects the field. The lab's
configuration is written for the prom/prometheus image, which has it. This module turns that
configuration into one the Debian build loads: each `kubernetes_sd_configs` entry becomes a
`file_sd_configs` entry, and `pod_targets` writes the targets that pod discovery would give for a
list of pods, with the same `__meta_kubernetes_*` labels (discovery/kubernetes/pod.go), so the
lab's relabelling runs unchanged on them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

META = "__meta_kubernetes_"


def sanitize(name: str) -> str:
    """A Kubernetes label name as part of a Prometheus label name (strutil.SanitizeLabelName)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The target groups pod discovery gives for `pods` (API objects as JSON): one target per
    container port, one per container without ports, none for a pod without an IP."""
    groups = []
    for p in pods:
        ip = (p.get("status") or {}).get("podIP")
        if not ip:
            continue
        meta = p["metadata"]
        common = {
            f"{META}namespace": meta["namespace"],
            f"{META}pod_name": meta["name"],
            f"{META}pod_ip": ip,
            f"{META}pod_uid": meta.get("uid", ""),
            f"{META}pod_phase": (p.get("status") or {}).get("phase", ""),
            f"{META}pod_node_name": p["spec"].get("nodeName", ""),
        }
        for k, v in (meta.get("labels") or {}).items():
            common[f"{META}pod_label_{sanitize(k)}"] = v
            common[f"{META}pod_labelpresent_{sanitize(k)}"] = "true"
        targets = []
        for c in p["spec"]["containers"]:
            base = {
                f"{META}pod_container_name": c["name"],
                f"{META}pod_container_image": c.get("image", ""),
                f"{META}pod_container_init": "false",
            }
            ports = c.get("ports") or []
            if not ports:
                targets.append({"targets": [ip], "labels": common | base})
            for port in ports:
                labels = common | base
                labels |= {
                    f"{META}pod_container_port_name": port.get("name", ""),
                    f"{META}pod_container_port_number": str(port["containerPort"]),
                    f"{META}pod_container_port_protocol": port.get("protocol", "TCP"),
                }
                targets.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": labels})
        groups += targets
    return groups


def write_targets(path: Path, pods: list[dict[str, Any]]) -> None:
    """The targets file, replaced whole (Prometheus never reads half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pod_targets(pods)))
    tmp.replace(path)


def as_file_sd(config: dict[str, Any], targets: str) -> dict[str, Any]:
    """`config` with each job's pod discovery read from the file `targets` instead."""
    out = dict(config)
    jobs = []
    for job in config["scrape_configs"]:
        job = dict(job)
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["file_sd_configs"] = [{"files": [targets], "refresh_interval": "1s"}]
        jobs.append(job)
    out["scrape_configs"] = jobs
    return out
