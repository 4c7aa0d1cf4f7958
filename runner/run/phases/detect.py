"""Detect: each expected alert is firing in Prometheus within its window from the injection
(the moment the fault's first change was in place)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runner import prometheus
from runner.errors import GamedayError
from runner.results import EventKind, Phase
from runner.run.context import Context, utcnow
from runner.scenario import AlertExpectation, LoadedScenario, Window
from runner.timing import elapsed_real


@dataclass(frozen=True)
class Detected:
    time_to_detect_s: float | None  # the first expected alert's; None: none fired, or none expected


@dataclass(frozen=True)
class AlertSeen:
    state: str  # inactive | pending | firing
    alert: dict[str, Any] | None  # Prometheus's record of it
    error: str  # why Prometheus could not be asked ("" when it answered)


def detect(ctx: Context, ls: LoadedScenario) -> Detected:
    alerts = ls.scenario.detect.alerts
    if not alerts:
        return Detected(None)
    ctx.progress("detect: waiting for alerts")
    ctx.rec.event("phase detect", kind=EventKind.PHASE)
    since = ctx.fault_began_at or ctx.injected_at or utcnow()
    for a in alerts:
        got = one_alert(ctx, a, since)
        if ctx.times.to_detect is None:
            ctx.times.to_detect = got
    return Detected(ctx.times.to_detect)


def one_alert(ctx: Context, a: AlertExpectation, since: datetime) -> float | None:
    name = f"detect: alert {a.name} fires"
    expected = f"firing within {a.within_s:g} s real of the injection"
    try:
        prom = ctx.lab.prometheus_url()
    except GamedayError as exc:  # a Prometheus the lab cannot find now (its pod has no IP)
        ctx.rec.error(phase=Phase.DETECT, name=name, expected=expected, observed=exc.message)
        return None
    if not prom:
        ctx.rec.error(
            phase=Phase.DETECT,
            name=name,
            expected=expected,
            observed="this lab has no Prometheus (gameday_lab.monitoring)",
        )
        return None
    seen = watch_alert(ctx, a, prom, since)
    if seen.error:
        ctx.rec.error(
            phase=Phase.DETECT, name=name, expected=expected, observed=f"probe error: {seen.error}"
        )
        return None
    if seen.state != "firing":
        ctx.rec.check(
            phase=Phase.DETECT,
            name=name,
            ok=False,
            expected=expected,
            observed=f"{seen.state} after {a.within_s:g} s real",
        )
        return None
    fired = alert_fired_at(ctx, a.name, seen.alert) if seen.alert else utcnow()
    ttd = elapsed_real(ctx.scale, since, fired)
    ctx.rec.event(
        f"alert {a.name} firing",
        ts=fired,
        source="prometheus",
        clock="Prometheus (activeAt + the rule's for)",
        kind=EventKind.ALERT,
    )
    ctx.rec.check(
        phase=Phase.DETECT,
        name=name,
        ok=ctx.scale.check(Window(max_s=a.within_s), ttd),
        expected=expected,
        observed=f"firing {ttd:.1f} s real after the injection",
    )
    return round(ttd, 3)


def watch_alert(ctx: Context, a: AlertExpectation, prom: str, since: datetime) -> AlertSeen:
    """Ask Prometheus until the alert fires or its window (from `since`) is over."""
    deadline = time.monotonic() + max(
        0.0,
        ctx.scale.to_lab(a.within_s) + ctx.scale.allowance_s - (utcnow() - since).total_seconds(),
    )
    seen = AlertSeen("inactive", None, "")
    while True:
        try:
            mine = [
                x
                for x in prometheus.alerts(ctx.http, prom)
                if x["labels"].get("alertname") == a.name
                and all(x["labels"].get(k) == v for k, v in a.labels.items())
            ]
            seen = AlertSeen(
                mine[0]["state"] if mine else "inactive", mine[0] if mine else None, ""
            )
        except GamedayError as exc:
            seen = AlertSeen(seen.state, seen.alert, exc.message)
        if seen.state == "firing" or time.monotonic() > deadline:
            return seen
        # no push API: look three times per evaluation interval, so that the runner goes on
        # within a third of an interval of the alert firing (its time is Prometheus's own)
        ctx.pause(ctx.scrape_interval_lab / 3)


def alert_fired_at(ctx: Context, name: str, alert: dict[str, Any]) -> datetime:
    """When Prometheus turned the alert to firing, by its own clock: activeAt (pending since)
    plus the rule's `for`, for the lab's own rules; otherwise now."""
    mon = ctx.lab.inventory.lab.monitoring
    rule = next((r for r in mon.rules if r.name == name), None) if mon else None
    active = alert.get("activeAt")
    if rule is None or not isinstance(active, str):
        return utcnow()
    started = datetime.fromisoformat(active.replace("Z", "+00:00"))
    return started + timedelta(seconds=ctx.scale.to_lab(rule.for_s))
