"""Prometheus's Kubernetes pod discovery, for a Prometheus built without it.

Debian's `prometheus` package (the one the tests run) is built without `kubernetes_sd_configs`
(its Kubernetes client is not packaged): its config loader rejects the field. The lab's
configuration is written for the prom/prometheus image, which has it. The stand-in API server
serves the same targets as HTTP service discovery (tests/kubeapi/httpsd.py: role `pod`'s
targets and `__meta_kubernetes_*` labels), so a configuration whose pod discovery names an API
server is rewritten to ask that endpoint instead, with the same credentials; everything after
discovery (relabelling, rules, alerting) stays the lab's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.kubeapi import httpsd


def _http_sd(sd: dict[str, Any], refresh: str) -> list[dict[str, Any]]:
    """One kubernetes_sd_configs entry (role pod, api_server named) as HTTP service discovery:
    one endpoint per namespace it names, with its `authorization`. Its `selectors` are left to
    the relabelling (the lab's keeps only its own nodes' pods)."""
    return [
        {
            "url": f"{sd['api_server'].rstrip('/')}/gameday/v1/http-sd/namespaces/{ns}/pods",
            "refresh_interval": refresh,
            **({"authorization": sd["authorization"]} if "authorization" in sd else {}),
        }
        for ns in (sd.get("namespaces") or {}).get("names") or []
    ]


def as_http_sd(config: dict[str, Any], refresh: str = "1s") -> dict[str, Any] | None:
    """`config` with each job's pod discovery asked of the stand-in's endpoint; None when it
    has pod discovery that does not name an API server, or none."""
    jobs, found = [], False
    for job in config.get("scrape_configs") or []:
        job = dict(job)
        sds = job.pop("kubernetes_sd_configs", None) or []
        if any(sd.get("role") != "pod" or not sd.get("api_server") for sd in sds):
            return None
        if sds:
            found = True
            job["http_sd_configs"] = [h for sd in sds for h in _http_sd(sd, refresh)]
        jobs.append(job)
    return {**config, "scrape_configs": jobs} if found else None


def rewrite_config(config_dir: Path) -> bool:
    """In the stand-in's kubelet: `config_dir/prometheus.yml` rewritten by `as_http_sd`, when
    there is one with pod discovery through a named API server (False: left as it is)."""
    path = config_dir / "prometheus.yml"
    if not path.is_file():
        return False
    rewritten = as_http_sd(yaml.safe_load(path.read_text()) or {})
    if rewritten is None:
        return False
    path.write_text(yaml.safe_dump(rewritten, sort_keys=False))
    return True


def as_file_sd(config: dict[str, Any], targets: str) -> dict[str, Any]:
    """`config` with each job's pod discovery read from the file `targets` instead."""
    jobs = []
    for job in config["scrape_configs"]:
        job = dict(job)
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["file_sd_configs"] = [{"files": [targets], "refresh_interval": "1s"}]
        jobs.append(job)
    return {**config, "scrape_configs": jobs}


def write_targets(path: Path, pods: list[dict[str, Any]]) -> None:
    """The targets role `pod` gives for `pods`, as a file, replaced whole (Prometheus never
    reads half of it)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(httpsd.target_groups(pods)))
    tmp.replace(path)
