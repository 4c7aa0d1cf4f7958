"""The few Prometheus HTTP API calls gameday makes (targets, alerts), errors mapped to LabError."""

from __future__ import annotations

from typing import Any

import httpx

from runner.errors import LabError
from runner.spec.expectations import AlertExpectation


def _get(http: httpx.Client, url: str, path: str) -> Any:
    try:
        r = http.get(url + path, timeout=5)
        r.raise_for_status()
        body = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise LabError(f"Prometheus at {url} did not answer {path}: {exc}") from exc
    if body.get("status") != "success":
        raise LabError(f"Prometheus at {url} refused {path}: {body.get('error')}")
    return body["data"]


def targets(http: httpx.Client, url: str, job: str) -> dict[str, dict[str, str]]:
    """node label -> {health, lastError, scrapeUrl} of the job's active targets."""
    data = _get(http, url, "/api/v1/targets?state=active")
    out = {}
    for t in data["activeTargets"]:
        if t["labels"].get("job") == job:
            node = t["labels"].get("node", t["labels"].get("instance", "?"))
            out[node] = {
                "health": t["health"],
                "lastError": t.get("lastError", ""),
                "scrapeUrl": t.get("scrapeUrl", ""),
            }
    return out


def alerts(http: httpx.Client, url: str) -> list[dict[str, Any]]:
    """Prometheus's active alerts: pending and firing."""
    return list(_get(http, url, "/api/v1/alerts")["alerts"])


def is_alert(alert: dict[str, Any], want: AlertExpectation) -> bool:
    """Prometheus's alert is the one the expectation names (its name and labels)."""
    labels = alert.get("labels") or {}
    return labels.get("alertname") == want.name and all(
        labels.get(k) == v for k, v in want.labels.items()
    )


def query(http: httpx.Client, url: str, promql: str) -> list[float]:
    """Values of an instant query (vector or scalar result)."""
    try:
        r = http.get(url + "/api/v1/query", params={"query": promql}, timeout=5)
        body = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise LabError(f"Prometheus at {url} did not answer the query: {exc}") from exc
    if body.get("status") != "success":
        raise LabError(f"Prometheus refused the query {promql!r}: {body.get('error')}")
    data = body["data"]
    if data["resultType"] == "scalar":
        return [float(data["result"][1])]
    return [float(item["value"][1]) for item in data["result"]]
