"""The alert the watchdog raises when it gives up, POSTed as Alertmanager's API v2 takes it
(POST /api/v2/alerts, a JSON list of alerts); any webhook that takes JSON can receive it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from runner.errors import LabError

ALERT_NAME = "GamedayWatchdogGaveUp"


def gave_up_alert(
    lab: str, inventory: str, group: str, nodes: list[str], reason: str
) -> list[dict[str, Any]]:
    """The alert: labels to route on, and annotations a person woken at night acts from."""
    head = nodes[0]
    return [
        {
            "labels": {
                "alertname": ALERT_NAME,
                "severity": "critical",
                "lab": lab,
                "group": group,
            },
            "annotations": {
                "summary": f"watchdog gave up on {group} ({', '.join(nodes)}): "
                "restart budget spent",
                "description": reason,
                "procedure": (
                    f"find the cause before restarting again (a crash that follows the request "
                    f"shape loops); then restart all {len(nodes)} nodes together: "
                    f"gameday lab restart {group} --lab {inventory}"
                ),
                "logs": f"gameday lab logs {head} --previous --lab {inventory}",
                "runbook": "docs/watchdog.md 'Watchdog: gameday watchdog'; seeds/000 section 8",
            },
            "startsAt": datetime.now(UTC).isoformat(),
        }
    ]


def post_alert(client: httpx.Client, url: str, alert: list[dict[str, Any]]) -> None:
    """POST the alert; LabError when it is not accepted."""
    try:
        r = client.post(url, json=alert, timeout=10.0)
    except httpx.HTTPError as exc:
        raise LabError(f"the alert could not be sent to {url}: {exc}") from None
    if r.status_code >= 300:
        raise LabError(f"the alert was refused by {url}: HTTP {r.status_code} {r.text[:200]}")
