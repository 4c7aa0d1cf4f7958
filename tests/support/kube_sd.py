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
import threading
from pathlib import Path
from typing import Any

import httpx
import yaml

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


# ---- in the stand-in's kubelet ------------------------------------------------------------------


def _pods(http: httpx.Client, sd: dict[str, Any], base: Path) -> list[dict[str, Any]] | None:
    """The pods `sd` (one kubernetes_sd_configs entry, role pod, with api_server) discovers:
    each named namespace listed with the selectors' label selector and the entry's bearer
    token. None when the API server does not answer with a list."""
    token = (base / sd["authorization"]["credentials_file"]).read_text().strip()
    labels = ",".join(s["label"] for s in sd.get("selectors") or [] if s.get("label"))
    out: list[dict[str, Any]] = []
    for ns in (sd.get("namespaces") or {}).get("names") or []:
        r = http.get(
            f"{sd['api_server']}/api/v1/namespaces/{ns}/pods",
            params={"labelSelector": labels} if labels else None,
            headers={"Authorization": f"Bearer {token}"},
        )
        if r.status_code != 200:
            return None
        out += r.json()["items"]
    return out


def discover_pods(config_dir: Path, stop: threading.Event, period_s: float = 0.2) -> bool:
    """When `config_dir/prometheus.yml` discovers pods through an API server, rewrite it to read
    each discovery's targets from a file beside it, and keep those files current from that API
    server (a list every `period_s`) until `stop`. False (nothing changed) for any other
    configuration."""
    path = config_dir / "prometheus.yml"
    if not path.is_file():
        return False
    config = yaml.safe_load(path.read_text())
    found: list[tuple[dict[str, Any], Path]] = []
    for job in config.get("scrape_configs") or []:
        for i, sd in enumerate(job.get("kubernetes_sd_configs") or []):
            if sd.get("role") != "pod" or not sd.get("api_server"):
                return False
            found.append((sd, config_dir / f"{job['job_name']}-{i}.pods.json"))
    if not found:
        return False
    for _, f in found:
        write_targets(f, [])
    jobs = []
    for job in config["scrape_configs"]:
        n = len(job.pop("kubernetes_sd_configs", None) or [])
        if n:
            files = [f"{job['job_name']}-{i}.pods.json" for i in range(n)]
            job["file_sd_configs"] = [{"files": files, "refresh_interval": "1s"}]
        jobs.append(job)
    config["scrape_configs"] = jobs
    path.write_text(yaml.safe_dump(config, sort_keys=False))

    def loop() -> None:
        with httpx.Client(timeout=5) as http:
            while not stop.is_set():
                for sd, f in found:
                    try:
                        pods = _pods(http, sd, config_dir)
                    except (httpx.HTTPError, OSError, ValueError, KeyError):
                        pods = None  # as pod discovery does: keep the last targets, retry
                    if pods is not None:
                        write_targets(f, pods)
                stop.wait(period_s)

    threading.Thread(target=loop, name="pod-discovery", daemon=True).start()
    return True
