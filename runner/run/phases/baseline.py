"""Baseline: before anything is injected, the target is at its baseline configuration, serving,
and every baseline probe passes. A baseline that does not hold means gameday cannot judge the
scenario: its verdict is error, not failed.

A scenario's `baseline.setup` is applied after the configuration check (which compares with the
lab's own baseline: setup is this run's change, journalled like the injection and undone at
cleanup) and before the probes, which then judge the scenario's starting configuration. The
probes run here record what later probes compare with (the correctness probe's reference)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import NoReturn

from runner.errors import GamedayError, LabError
from runner.labs.base import ChangeKind, PartDied
from runner.labs.common.adoption import redeployed_error
from runner.results.schema import EventKind, Phase, Verdict
from runner.run import prometheus_api as prometheus
from runner.run.apply import SETUP, UserStepFailed, apply_actions
from runner.run.context import Context, ScenarioAborted, utcnow
from runner.run.plan import describe_action
from runner.spec.actions import Action
from runner.spec.scenario import LoadedScenario, reads_prometheus

PROMETHEUS_READY_S = 60.0  # wall seconds for the lab's Prometheus to scrape every target once
# wall seconds at least for an alert whose cause is gone (an engine answers again) to resolve:
# a few of Prometheus's evaluations on a loaded machine (three intervals where they are longer)
ALERTS_QUIET_S = 10.0


@dataclass(frozen=True)
class Steady:
    at: datetime  # every baseline probe passed


def baseline(ctx: Context, ls: LoadedScenario) -> Steady:
    ctx.progress("baseline: waiting for the target to be ready")
    ctx.rec.event("phase baseline", kind=EventKind.PHASE)
    if ctx.lab.config(ctx.target) != ctx.lab.baseline_config(ctx.target):
        if ctx.target in ctx.lab.redeployed():  # the team's newer deployment, not a leftover
            raise redeployed_error(
                f"lab {ctx.lab.inventory.lab.name!r}", [ctx.target], str(ctx.lab.inventory.path)
            )
        raise LabError(
            f"node {ctx.target} is not at its baseline configuration",
            hint="a previous run left changes behind: run `gameday cleanup`",
        )
    if reads_prometheus(ls.scenario.baseline.probes, ls.scenario.baseline.setup):
        monitoring_scraping(ctx, ls)  # the baseline's own steps read it
    gen0 = ctx.lab.states()[ctx.target].generation
    restarted = setup(ctx, ls.scenario.baseline.setup)
    boot = ctx.boot_timeout_lab
    # a setup that re-applied the target is judged on the incarnation it started
    w = ctx.wait_for(lambda s, _: s.ready and (not restarted or s.generation > gen0), boot)
    if not w.done:
        ctx.rec.error(
            phase=Phase.BASELINE,
            name="baseline: target ready",
            expected="the target serves before anything is injected",
            observed=f"{w.state.status.value}, ready={w.state.ready} after {boot:.1f} lab s",
        )
        raise ScenarioAborted
    # A steady state is awaited, not sampled: the previous scenario's cleanup may still be
    # settling (an exporter restarting, Prometheus's next scrape).
    settle_until = time.monotonic() + max(2.0, 10 * ctx.scrape_interval_lab)
    results = ctx.poll_until(
        ls.scenario.baseline.probes,
        settle_until,
        lambda: ctx.scrape_interval_lab,
        record_references=True,
    )
    for r in results:
        passed = r.verdict is Verdict.PASSED
        ctx.rec.probe(Phase.BASELINE, r, verdict=Verdict.PASSED if passed else Verdict.ERROR)
    if any(r.verdict is not Verdict.PASSED for r in results):
        raise ScenarioAborted
    return Steady(utcnow())


def monitoring_scraping(ctx: Context, ls: LoadedScenario) -> None:
    """The lab's Prometheus has scraped every target once, for a scenario that uses it: before
    the injection, whose detection it watches. Brought up with the lab, its first targets come
    5 s of wall time later (its discovery's pace, whatever the time scale), so a scenario whose
    baseline does not read it waits here, after its baseline and the load's first answers,
    which take that time anyway; a failure is the baseline's (error: the scenario cannot be
    judged)."""
    if not ls.scenario.uses_monitoring:
        return
    try:
        ctx.lab.monitoring_ready(PROMETHEUS_READY_S)
    except LabError as exc:
        ctx.rec.error(
            phase=Phase.BASELINE,
            name="baseline: Prometheus scraping",
            expected="Prometheus has scraped every target of its configuration",
            observed=exc.message,
            detail=exc.hint or "",
            died=exc.death if isinstance(exc, PartDied) else None,
        )
        raise ScenarioAborted from exc


def alerts_quiet(ctx: Context, ls: LoadedScenario) -> None:
    """Right before the injection: none of the alerts the scenario's detection waits for is
    pending or firing. Prometheus keeps one alert per label set: one active since before the
    fault (the lab's boot, when an engine was not yet answering; an earlier scenario's fault)
    would stay active through this fault and never become this fault's, so detection could not
    be judged. An alert whose expression no longer holds resolves at the next evaluation (one
    over a window, once the window has passed): waited for, ALERTS_QUIET_S or three evaluation
    intervals, whichever is longer."""
    wanted = ls.scenario.detect.alerts
    if not wanted:
        return
    try:
        prom = ctx.lab.prometheus_url()
    except GamedayError:
        prom = None
    if not prom:
        return  # detection itself says why it cannot look
    waited = max(ALERTS_QUIET_S, 3 * ctx.scrape_interval_lab)
    deadline = time.monotonic() + waited
    while True:
        try:
            active = [
                x
                for x in prometheus.alerts(ctx.http, prom)
                if any(prometheus.is_alert(x, a) for a in wanted)
            ]
        except GamedayError as exc:
            active, error = [], exc.message
        else:
            error = ""
        if not active and not error:
            return
        if time.monotonic() > deadline:
            break
        ctx.pause(ctx.scrape_interval_lab / 3)
    seen = error or "; ".join(
        f"{x['labels'].get('alertname')} {x.get('state')} since {x.get('activeAt')} "
        f"({', '.join(f'{k}={v}' for k, v in sorted(x['labels'].items()) if k != 'alertname')})"
        for x in active
    )
    ctx.rec.error(
        phase=Phase.BASELINE,
        name="baseline: the scenario's alerts are quiet",
        expected="no alert the detection waits for is pending or firing before the injection",
        observed=f"{seen}, still after {waited:g} s",
        detail="an alert active before the fault would hide this fault's own: look at what "
        "the lab's Prometheus finds down (`gameday alerts`, its /alerts page)",
    )
    raise ScenarioAborted


def setup(ctx: Context, actions: list[Action]) -> bool:
    """Apply the scenario's setup, journalled like an injection; whether it re-applied the
    target's configuration (a new incarnation to wait for). A setup that fails leaves nothing to
    judge: an error, and cleanup undoes what it applied."""
    if not actions:
        return False
    ctx.progress("baseline: setup")
    before = len(ctx.open_changes)
    try:
        apply_actions(ctx, actions, SETUP)
    except UserStepFailed as exc:
        _setup_error(ctx, exc.label, exc.run.observed)
    except GamedayError as exc:
        _setup_error(ctx, "setup", exc.message)
    ctx.rec.verdict(
        phase=Phase.BASELINE,
        name="baseline: setup",
        verdict=Verdict.PASSED,
        expected="the scenario's starting configuration applied",
        observed="; ".join(describe_action(a) for a in actions),
    )
    return any(
        c.kind is ChangeKind.NODE_CONFIG and c.node == ctx.target
        for _, c in ctx.open_changes[before:]
    )


def _setup_error(ctx: Context, name: str, observed: str) -> NoReturn:
    ctx.rec.error(
        phase=Phase.BASELINE,
        name=f"baseline: {name}",
        expected="the baseline's setup is applied",
        observed=observed,
        detail="the scenario's starting configuration is not in place; cleanup undoes what ran",
    )
    raise ScenarioAborted
