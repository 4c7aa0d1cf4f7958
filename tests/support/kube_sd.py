"""Prometheus's Kubernetes pod discovery, for a Prometheus built without it.

Debian's `prometheus` package (the one the tests run) is built without `kubernetes_sd_configs`
(its Kubernetes client is not packaged): its config loader rejects the field. The lab's
configuration is written for the prom/prometheus image, which has it. The stand-in API server
serves the same targets as HTTP service discovery (tests/kubeapi/httpsd.py: role `pod`'s
targets and `__meta_kubernetes_*` labels), so a configuration whose pod discovery names an API
server is rewritten to ask that endpoint instead, with the same credentials; everything after
discovery (relabelling, rules, routes) stays the lab's own.

The stand-in has no cluster DNS either: an Alertmanager that Prometheus's `alerting:` names by a
Service's DNS name (`<svc>.<ns>.svc:<port>`) is reached through that Service's pods, found the
same way and kept by the Service's selector and targetPort, as kube-proxy would route it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.kubeapi import httpsd


def _http_sd(sd: dict[str, Any], refresh: str, base: str | None = None) -> list[dict[str, Any]]:
    """One kubernetes_sd_configs entry (role pod, api_server named) as HTTP service discovery at
    `base` (None: the API server it names): one endpoint per namespace it names, with its
    `authorization`. Its `selectors` are left to the relabelling (the lab's keeps only its own
    nodes' pods)."""
    root = (base or sd["api_server"]).rstrip("/")
    return [
        {
            "url": f"{root}/gameday/v1/http-sd/namespaces/{ns}/pods",
            "refresh_interval": refresh,
            **({"authorization": sd["authorization"]} if "authorization" in sd else {}),
        }
        for ns in (sd.get("namespaces") or {}).get("names") or []
    ]


# a Service's cluster DNS name as Prometheus's alerting section names it: <svc>.<ns>.svc[...]:port
_SERVICE_DNS = re.compile(
    r"^(?P<svc>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<ns>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"\.svc(\.cluster\.local)?:(?P<port>\d+)$"
)


def _service_endpoints(
    target: str,
    services: list[dict[str, Any]],
    sd: dict[str, Any],
    refresh: str,
    base: str | None = None,
) -> dict[str, Any] | None:
    """An alertmanagers entry reaching the pods behind the Service `target` names, as cluster DNS
    and kube-proxy would: the namespace's pods through HTTP discovery, kept by the Service's
    selector and its port's targetPort. None: not a Service of `services`."""
    m = _SERVICE_DNS.match(target)
    if not m:
        return None
    svc = next(
        (
            s
            for s in services
            if s["metadata"]["name"] == m["svc"] and s["metadata"]["namespace"] == m["ns"]
        ),
        None,
    )
    if svc is None:
        return None
    port = next((p for p in svc["spec"].get("ports") or [] if p["port"] == int(m["port"])), None)
    if port is None:
        return None
    target_port = port.get("targetPort", port["port"])
    by = "name" if isinstance(target_port, str) else "number"
    keep = [
        {
            "source_labels": [f"__meta_kubernetes_pod_label_{httpsd.sanitize(k)}"],
            "regex": re.escape(str(v)),
            "action": "keep",
        }
        for k, v in sorted((svc["spec"].get("selector") or {}).items())
    ]
    keep.append(
        {
            "source_labels": [f"__meta_kubernetes_pod_container_port_{by}"],
            "regex": re.escape(str(target_port)),
            "action": "keep",
        }
    )
    return {
        "http_sd_configs": _http_sd(sd | {"namespaces": {"names": [m["ns"]]}}, refresh, base),
        "relabel_configs": keep,
    }


def _alerting(
    config: dict[str, Any],
    services: list[dict[str, Any]],
    sd: dict[str, Any],
    refresh: str,
    base: str | None = None,
) -> dict[str, Any] | None:
    """Prometheus's `alerting:` with each Alertmanager named by a Service's DNS name reached
    through the Service's pods instead (the stand-in has no cluster DNS); None: nothing to do."""
    alerting = config.get("alerting") or {}
    out, changed = [], False
    for am in alerting.get("alertmanagers") or []:
        if not am.get("static_configs"):
            out.append(am)  # discovered some other way: as it is
            continue
        rest = []
        for sc in am["static_configs"]:
            for t in sc.get("targets") or []:
                entry = _service_endpoints(t, services, sd, refresh, base)
                if entry is None:
                    rest.append(t)
                    continue
                changed = True
                own = {k: v for k, v in am.items() if k != "static_configs"}
                # the entry's own relabelling still applies, after the Service's selection
                keep = entry["relabel_configs"] + list(am.get("relabel_configs") or [])
                out.append(own | entry | {"relabel_configs": keep})
        if rest:
            out.append(am | {"static_configs": [{"targets": rest}]})
    return {**alerting, "alertmanagers": out} if changed else None


def as_http_sd(
    config: dict[str, Any],
    refresh: str = "1s",
    services: list[dict[str, Any]] | None = None,
    base: str | None = None,
) -> dict[str, Any] | None:
    """`config` with each job's pod discovery asked of the HTTP discovery endpoint at `base`
    (None: the stand-in's, at the API server named), and each Alertmanager named by one of
    `services`' DNS names reached through its pods; None when it has pod discovery that does not
    name an API server, or none."""
    jobs, found, api_sd = [], False, None
    for job in config.get("scrape_configs") or []:
        job = dict(job)
        sds = job.pop("kubernetes_sd_configs", None) or []
        if any(sd.get("role") != "pod" or not sd.get("api_server") for sd in sds):
            return None
        if sds:
            found, api_sd = True, sds[0]
            job["http_sd_configs"] = [h for sd in sds for h in _http_sd(sd, refresh, base)]
        jobs.append(job)
    if not found:
        return None
    out = {**config, "scrape_configs": jobs}
    alerting = None if api_sd is None else _alerting(config, services or [], api_sd, refresh, base)
    if alerting:
        out["alerting"] = alerting
    return out


def rewrite_config(
    config_dir: Path, services: list[dict[str, Any]] | None = None, base: str | None = None
) -> bool:
    """In a test kubelet: `config_dir/prometheus.yml` rewritten by `as_http_sd` (discovery at
    `base`), when there is one with pod discovery through a named API server (False: left as it
    is)."""
    path = config_dir / "prometheus.yml"
    if not path.is_file():
        return False
    rewritten = as_http_sd(yaml.safe_load(path.read_text()) or {}, services=services, base=base)
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
