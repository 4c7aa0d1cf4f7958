"""Detect: each expected alert is firing in Prometheus within its window from the injection
(the moment the fault's first change was in place), and, where the scenario asks, delivered
through the lab's Alertmanager to the runner's webhook receiver with the annotations a person
paged needs."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runner.errors import GamedayError
from runner.labs.common.alertmanager_config import receiver_token
from runner.labs.common.prometheus_config import DEATH_CHECK_S, LAB_LABEL
from runner.labs.registry import entry
from runner.results.schema import EventKind, PartDeath, Phase
from runner.run import prometheus_api as prometheus
from runner.run.context import LOAD_RECHECK_S, Context, utcnow
from runner.run.receiver import ReceivedAlert, WebhookReceiver, held
from runner.spec.expectations import AlertExpectation
from runner.spec.kinds import Window
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import elapsed_real


@dataclass(frozen=True)
class Detected:
    time_to_detect_s: float | None  # the first expected alert's; None: none fired, or none expected


@dataclass(frozen=True)
class AlertSeen:
    state: str  # inactive | pending | firing
    alert: dict[str, Any] | None  # Prometheus's record of it
    error: str  # why Prometheus could not be asked ("" when it answered)
    died: PartDeath | None = None  # the part of the lab's monitoring that died meanwhile


@contextlib.contextmanager
def alert_receiver(ctx: Context, ls: LoadedScenario) -> Iterator[WebhookReceiver | str | None]:
    """The runner's webhook receiver, listening while the block runs, when the scenario asks for
    a delivery (None otherwise; a str: why it cannot listen). Started before the injection:
    Alertmanager delivers within group_wait of the alert firing, which can be before detect.
    In a suite it is the instance's, listening since the instance's setup."""
    if not any(a.delivered for a in ls.scenario.detect.alerts):
        yield None
        return
    with contextlib.ExitStack() as stack:
        yield start_receiver(ctx, stack)


def detect(
    ctx: Context, ls: LoadedScenario, receiver: WebhookReceiver | str | None = None
) -> Detected:
    """`receiver`: one listening since before the injection (alert_receiver); without it one
    listens from now on."""
    alerts = ls.scenario.detect.alerts
    if not alerts:
        return Detected(None)
    ctx.progress("detect: waiting for alerts")
    ctx.rec.event("phase detect", kind=EventKind.PHASE)
    since = ctx.fault_began_at or ctx.injected_at or utcnow()
    with contextlib.ExitStack() as stack:
        if receiver is None:
            receiver = stack.enter_context(alert_receiver(ctx, ls))
        for a in alerts:
            got = one_alert(ctx, a, since)
            if ctx.times.to_detect is None:
                ctx.times.to_detect = got
            if a.delivered:
                check_delivered(ctx, a, since, receiver)
        if isinstance(receiver, WebhookReceiver):
            check_own(ctx, receiver, since)
    return Detected(ctx.times.to_detect)


def start_receiver(ctx: Context, stack: contextlib.ExitStack) -> WebhookReceiver | str:
    """The lab's webhook receiver, listening until `stack` closes; or why it cannot."""
    if ctx.lab.inventory.lab.monitoring is None:
        return "this lab has no monitoring (gameday_lab.monitoring)"
    host, port = entry(ctx.lab.inventory.lab.kind).receiver_listen(ctx.lab.inventory)
    try:
        token = receiver_token(ctx.lab.state_dir)
        return stack.enter_context(held(host, port, ctx.lab.inventory.lab.name, token))
    except GamedayError as exc:
        return exc.message


def check_delivered(
    ctx: Context, a: AlertExpectation, since: datetime, receiver: WebhookReceiver | str | None
) -> None:
    """The alert reached the receiver, firing, within its delivery window, carrying the
    annotation text the scenario asks for."""
    name = f"detect: alert {a.name} delivered"
    want = "".join(f"; {k} contains {v!r}" for k, v in sorted(a.annotations.items()))
    expected = f"delivered firing within {a.delivery_window_s:g} s real of the injection{want}"
    if not isinstance(receiver, WebhookReceiver):
        observed = f"probe error: {receiver or 'no receiver'}"
        ctx.rec.error(phase=Phase.DETECT, name=name, expected=expected, observed=observed)
        return
    window_lab = ctx.scale.to_lab(a.delivery_window_s) + ctx.scale.allowance_s
    left = window_lab - (utcnow() - since).total_seconds()

    earliest = _earliest(ctx, since)

    def mine(r: ReceivedAlert) -> bool:
        return (
            r.alertname == a.name
            and r.status == "firing"
            and all(r.labels.get(k) == v for k, v in a.labels.items())
            and (r.started() or earliest) >= earliest
        )

    # looked at in slices, so that a part of the alert path that died ends the wait at once
    deadline = time.monotonic() + max(0.0, left)
    got = receiver.wait_for(mine, min(DEATH_CHECK_S * 4, max(0.0, left)))
    while got is None and time.monotonic() < deadline:
        if (death := receiver.death() or ctx.lab.dead_part()) is not None:
            ctx.rec.error(
                phase=Phase.DETECT,
                name=name,
                expected=expected,
                observed=death.summary(),
                died=death,
            )
            return
        got = receiver.wait_for(mine, min(DEATH_CHECK_S * 4, deadline - time.monotonic()))
    # the time the machine's CPUs were contended is waited for too (ctx.window_over)
    while got is None and not ctx.window_over(since, window_lab):
        got = receiver.wait_for(mine, LOAD_RECHECK_S)
    window = Window(max_s=a.delivery_window_s)
    if got is None:
        now = utcnow()
        waited = elapsed_real(ctx.scale, since, now)
        observed = f"nothing delivered after {a.delivery_window_s:g} s real" + received_since(
            receiver, earliest
        )
        ctx.check_window(
            Phase.DETECT, name, window, waited, observed, (since, now), expected=expected
        )
        return
    after = elapsed_real(ctx.scale, since, got.received_at)
    ctx.rec.event(
        f"alert {a.name} delivered to the runner's receiver",
        ts=got.received_at,
        source="alertmanager",
        clock="the runner's (the webhook POST's arrival)",
        kind=EventKind.ALERT,
    )
    missing = [k for k, v in a.annotations.items() if v not in got.annotations.get(k, "")]
    note = f"; missing annotation text: {', '.join(sorted(missing))}" if missing else ""
    observed = f"delivered {after:.1f} s real after the injection: {got.evidence()}{note}"
    if missing:  # wrong text is wrong however loaded the machine was
        ctx.rec.check(phase=Phase.DETECT, name=name, ok=False, expected=expected, observed=observed)
        return
    span = (since, got.received_at)
    ctx.check_window(Phase.DETECT, name, window, after, observed, span, expected=expected)


def received_since(receiver: WebhookReceiver, since: datetime) -> str:
    """What the receiver took in since `since`, for a failed delivery's evidence: alerts that
    began before it (a notification of an earlier fault, retried) are named as such."""
    seen = sorted(
        {
            f"{r.alertname} {r.status}"
            + ("" if (r.started() or since) >= since else " (began before the injection)")
            for r in receiver.received(since)
        }
    )
    failed = receiver.failures()
    return (f" (received: {', '.join(seen)})" if seen else "") + (
        f" (requests the receiver failed on: {'; '.join(failed)})" if failed else ""
    )


def check_own(ctx: Context, receiver: WebhookReceiver, since: datetime) -> None:
    """An alert of another lab delivered to this lab's receiver is a lab error: the instances'
    alert paths cross, and no delivery check of theirs can be trusted."""
    foreign = receiver.foreign(since)
    if not foreign:
        return
    ctx.rec.error(
        phase=Phase.DETECT,
        name="detect: only this lab's alerts delivered",
        expected=f"every alert delivered to {receiver.url} carries {LAB_LABEL}={receiver.lab}",
        observed=f"{len(foreign)} alert(s) of another lab: "
        + "; ".join(f"{LAB_LABEL}={r.lab()}: {r.evidence()}" for r in foreign[:3]),
    )


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
            phase=Phase.DETECT,
            name=name,
            expected=expected,
            observed=seen.error if seen.died else f"probe error: {seen.error}",
            died=seen.died,
        )
        return None
    window = Window(max_s=a.within_s)
    if seen.state != "firing":
        now = utcnow()
        waited = elapsed_real(ctx.scale, since, now)
        observed = f"{seen.state} after {a.within_s:g} s real"
        ctx.check_window(
            Phase.DETECT, name, window, waited, observed, (since, now), expected=expected
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
    observed = f"firing {ttd:.1f} s real after the injection"
    ctx.check_window(Phase.DETECT, name, window, ttd, observed, (since, fired), expected=expected)
    return round(ttd, 3)


def watch_alert(ctx: Context, a: AlertExpectation, prom: str, since: datetime) -> AlertSeen:
    """Ask Prometheus until the alert fires or its window (from `since`, the machine's
    contended time not counted: ctx.window_over) is over."""
    window_lab = ctx.scale.to_lab(a.within_s) + ctx.scale.allowance_s
    seen = AlertSeen("inactive", None, "")
    checked = 0.0
    earliest = _earliest(ctx, since)
    while True:
        if time.monotonic() - checked >= DEATH_CHECK_S:
            checked = time.monotonic()
            if (death := ctx.lab.dead_part()) is not None:  # nothing will fire: stop now
                return AlertSeen(seen.state, seen.alert, death.summary(), death)
        try:
            mine = [
                x
                for x in prometheus.alerts(ctx.http, prom)
                if prometheus.is_alert(x, a) and _active_since(x, earliest)
            ]
            seen = AlertSeen(
                mine[0]["state"] if mine else "inactive", mine[0] if mine else None, ""
            )
        except GamedayError as exc:
            seen = AlertSeen(seen.state, seen.alert, exc.message)
        if seen.state == "firing" or ctx.window_over(since, window_lab):
            return seen
        # no push API: look three times per evaluation interval, so that the runner goes on
        # within a third of an interval of the alert firing (its time is Prometheus's own)
        ctx.pause(ctx.scrape_interval_lab / 3)


def _earliest(ctx: Context, since: datetime) -> datetime:
    """The earliest an alert of this fault can have become active. One active before is
    another's: the lab's boot (ServingDown fires on the engines' absence before Prometheus's
    first scrape) or an earlier fault's. Counted from the injection's start, not from the fault
    being in place (`since`): its first change can show in a scrape before its last is made (a
    node's exporter leaves its address before the move ends), less one scrape interval."""
    began = min(ctx.injected_at or since, since)
    return began - timedelta(seconds=ctx.scrape_interval_lab)


def _active_since(alert: dict[str, Any], earliest: datetime) -> bool:
    """Whether Prometheus's alert became active at or after `earliest` (one without a readable
    activeAt is taken as this fault's)."""
    active = alert.get("activeAt")
    if not isinstance(active, str):
        return True
    try:
        return datetime.fromisoformat(active.replace("Z", "+00:00")) >= earliest
    except ValueError:
        return True


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
