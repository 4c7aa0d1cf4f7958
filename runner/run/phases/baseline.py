"""Baseline: before anything is injected, the target is at its baseline configuration, serving,
and every baseline probe passes. A baseline that does not hold means gameday cannot judge the
scenario: its verdict is error, not failed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from runner.errors import LabError
from runner.results import EventKind, Phase, Verdict
from runner.run.context import Context, ScenarioAborted, utcnow
from runner.scenario import LoadedScenario

PROMETHEUS_READY_S = 60.0  # wall seconds for the lab's Prometheus to scrape every target once


@dataclass(frozen=True)
class Steady:
    at: datetime  # every baseline probe passed


def baseline(ctx: Context, ls: LoadedScenario) -> Steady:
    ctx.progress("baseline: waiting for the target to be ready")
    ctx.rec.event("phase baseline", kind=EventKind.PHASE)
    if ctx.lab.config(ctx.target) != ctx.lab.baseline_config(ctx.target):
        raise LabError(
            f"node {ctx.target} is not at its baseline configuration",
            hint="a previous run left changes behind: run `gameday cleanup`",
        )
    if ls.scenario.uses_monitoring:
        # brought up with the lab, but its first targets come 5 s of wall time later
        try:
            ctx.lab.monitoring_ready(PROMETHEUS_READY_S)
        except LabError as exc:
            ctx.rec.error(
                phase=Phase.BASELINE,
                name="baseline: Prometheus scraping",
                expected="Prometheus has scraped every target of its configuration",
                observed=exc.message,
                detail=exc.hint or "",
            )
            raise ScenarioAborted from exc
    boot = ctx.boot_timeout_lab
    w = ctx.wait_for(lambda s, _: s.ready, boot)
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
        ls.scenario.baseline.probes, settle_until, lambda: ctx.scrape_interval_lab
    )
    for r in results:
        passed = r.verdict is Verdict.PASSED
        ctx.rec.probe(Phase.BASELINE, r, verdict=Verdict.PASSED if passed else Verdict.ERROR)
    if any(r.verdict is not Verdict.PASSED for r in results):
        raise ScenarioAborted
    return Steady(utcnow())
