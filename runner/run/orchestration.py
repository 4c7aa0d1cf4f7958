"""One scenario on one lab, top to bottom."""

from __future__ import annotations

import traceback
from datetime import datetime

import httpx

from runner.errors import GamedayError, LabError
from runner.labs.base import LabDriver, PartDied
from runner.results.repopaths import repository_root, shown, shown_runbook
from runner.results.schema import EventKind, Interruption, Phase, ScenarioResult, combine
from runner.run.context import Context, Progress, ScenarioAborted, http_client, utcnow
from runner.run.impact import Users
from runner.run.interrupt import ScenarioInterrupted, interruption, shielded_from_sigint
from runner.run.journal import Journal
from runner.run.phases.baseline import alerts_quiet, baseline, monitoring_scraping
from runner.run.phases.cleanup import cleanup
from runner.run.phases.detect import alert_receiver, detect
from runner.run.phases.expect import expect
from runner.run.phases.inject import inject
from runner.run.phases.recover import recover
from runner.run.record import Recorder
from runner.spec.scenario import LoadedScenario, variant_notes
from runner.spec.timing import TimeScale

LAB_CARRIES_OUT = "the lab carries out the scenario"


def run_scenario(
    ls: LoadedScenario,
    lab: LabDriver,
    journal: Journal,
    progress: Progress,
    *,
    http: httpx.Client | None = None,
) -> ScenarioResult:
    """Run every phase; whatever happens, clean up. `http`: the probes' client (default: the
    process's own)."""
    started = utcnow()
    vllm = lab.inventory.lab.vllm_version
    platform = lab.inventory.lab.platform
    ls = ls.for_lab(lab.kind, vllm, platform)
    ctx = Context(
        lab=lab,
        scale=TimeScale.of(lab.inventory.lab),
        journal=journal,
        scenario_id=ls.scenario.metadata.id,
        target=ls.scenario.target,
        progress=progress,
        rec=Recorder(),
        http=http or http_client(),
        seq=lab.last_event_seq(),
        folder=ls.path.parent,
    )
    if note := ls.scenario.lab_notes.get(lab.kind):
        ctx.rec.notes.append(f"{lab.kind.value} lab: {note}")
    ctx.rec.notes += variant_notes(ls.scenario, lab.kind, vllm, platform)
    stopped: Interruption | None = None
    try:
        phases(ctx, ls)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: clean up, then stop the run
        stopped = interruption(exc)
        ctx.rec.error(
            phase=Phase.RUN,
            name="interrupted",
            expected="the scenario runs to its end",
            observed=f"interrupted by {stopped.value} during {_phase_now(ctx)}; cleanup ran",
        )
    except ScenarioAborted:
        pass
    except GamedayError as exc:
        ctx.rec.error(
            phase=Phase.RUN,
            name="lab",
            expected=LAB_CARRIES_OUT,
            observed=str(exc),
            died=exc.death if isinstance(exc, PartDied) else None,
        )
    except Exception as exc:  # a bug or an unmapped error: this scenario's verdict is `error`
        ctx.rec.error(
            phase=Phase.RUN,
            name="lab",
            expected=LAB_CARRIES_OUT,
            observed=f"{type(exc).__name__}: {exc}",
            detail="".join(traceback.format_exception(exc)),
        )
    finally:
        with shielded_from_sigint():
            cleanup(ctx)
    if stopped is not None:
        raise ScenarioInterrupted(result(ls, ctx, started), stopped)
    return result(ls, ctx, started)


def _phase_now(ctx: Context) -> str:
    """The phase the run was in: the last that began (`phase recover` -> `recover`)."""
    began = [e.event for e in ctx.rec.timeline if e.kind is EventKind.PHASE]
    return began[-1].removeprefix("phase ") if began else "the start"


def phases(ctx: Context, ls: LoadedScenario) -> None:
    if not ctx.lab.inventory.resolve(ls.scenario.target):
        raise LabError(
            f"scenario target {ls.scenario.target!r} is not a host or group of "
            f"{ctx.lab.inventory.path}"
        )
    users = Users(ctx, ls.scenario.load, ctx.lab.inventory.lab.load_scale)
    try:
        with alert_receiver(ctx, ls) as receiver:  # listening before the alerts can fire
            baseline(ctx, ls)
            users.begin()  # the load from the baseline on, through every later phase
            monitoring_scraping(ctx, ls)  # Prometheus's first scrape, if it waits for one
            alerts_quiet(ctx, ls)  # no alert of this fault's already active
            inject(ctx, ls)
            ctx.times.to_fail = expect(ctx, ls).time_to_fail_s
            detect(ctx, ls, receiver)  # records the first alert's time as it fires
        ctx.times.to_recover = recover(ctx, ls).time_to_recover_s
        users.hold()
    finally:
        users.finish()  # never outlives the run, whatever ended it
    users.judge()


def result(ls: LoadedScenario, ctx: Context, started: datetime) -> ScenarioResult:
    rec, times = ctx.rec, ctx.times
    root = repository_root()
    return ScenarioResult(
        id=ls.scenario.metadata.id,
        title=ls.scenario.metadata.title,
        file=shown(ls.path, root),
        lab=ctx.lab.inventory.lab.name,
        verdict=combine([a.verdict for a in rec.assertions]),
        time_to_fail_s=times.to_fail,
        time_to_recover_s=times.to_recover,
        time_to_detect_s=times.to_detect,
        started_at=started,
        finished_at=utcnow(),
        assertions=rec.assertions,
        timeline=sorted(rec.timeline, key=lambda e: e.ts),
        evidence=rec.evidence,
        notes=rec.notes,
        impact=ctx.impact,
        runbooks={
            f"recover {i}: {step.name}": shown_runbook(step.runbook, ls.path, root)
            for i, step in enumerate(ls.scenario.recover, 1)
            if step.runbook
        },
    )
