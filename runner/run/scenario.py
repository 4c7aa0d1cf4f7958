"""One scenario on one lab, top to bottom."""

from __future__ import annotations

import traceback

import httpx

from runner.errors import GamedayError, LabError
from runner.journal import Journal
from runner.labs.base import LabDriver
from runner.results import Phase, ScenarioResult, combine
from runner.run.context import Context, Progress, ScenarioAborted, http_client, utcnow
from runner.run.interrupt import shielded_from_sigint
from runner.run.phases.baseline import baseline
from runner.run.phases.cleanup import cleanup
from runner.run.phases.detect import detect
from runner.run.phases.expect import expect
from runner.run.phases.inject import inject
from runner.run.phases.recover import recover
from runner.run.record import Recorder
from runner.scenario import LoadedScenario
from runner.timing import TimeScale

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
    sc = ls.scenario
    rec = Recorder()
    started = utcnow()
    spec = lab.inventory.lab
    if note := sc.lab_notes.get(lab.kind):
        rec.notes.append(f"{lab.kind.value} lab: {note}")
    ttf = ttd = ttr = None
    ctx = Context(
        lab=lab,
        scale=TimeScale.of(spec),
        journal=journal,
        scenario_id=sc.metadata.id,
        target=sc.target,
        progress=progress,
        rec=rec,
        http=http or http_client(),
        seq=lab.last_event_seq(),
    )
    try:
        if not lab.inventory.resolve(sc.target):
            raise LabError(
                f"scenario target {sc.target!r} is not a host or group of {lab.inventory.path}"
            )
        baseline(ctx, ls)
        inject(ctx, ls)
        ttf = expect(ctx, ls).time_to_fail_s
        ttd = detect(ctx, ls).time_to_detect_s
        ttr = recover(ctx, ls).time_to_recover_s
    except ScenarioAborted:
        pass
    except GamedayError as exc:
        rec.error(phase=Phase.RUN, name="lab", expected=LAB_CARRIES_OUT, observed=str(exc))
    except Exception as exc:  # a bug or an unmapped error: this scenario's verdict is `error`
        rec.error(
            phase=Phase.RUN,
            name="lab",
            expected=LAB_CARRIES_OUT,
            observed=f"{type(exc).__name__}: {exc}",
            detail="".join(traceback.format_exception(exc)),
        )
    finally:
        with shielded_from_sigint():
            cleanup(ctx)
    return ScenarioResult(
        id=sc.metadata.id,
        title=sc.metadata.title,
        file=str(ls.path),
        lab=spec.name,
        verdict=combine([a.verdict for a in rec.assertions]),
        time_to_fail_s=ttf,
        time_to_recover_s=ttr,
        time_to_detect_s=ttd,
        started_at=started,
        finished_at=utcnow(),
        assertions=rec.assertions,
        timeline=sorted(rec.timeline, key=lambda e: e.ts),
        evidence=rec.evidence,
        notes=rec.notes,
    )
