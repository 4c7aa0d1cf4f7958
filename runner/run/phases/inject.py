"""Inject: the scenario's fault, applied (and journalled) on the lab."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.results.schema import EventKind, Phase
from runner.run.apply import INJECT, UserStepFailed, apply_actions
from runner.run.context import Context, ScenarioAborted, utcnow
from runner.spec.scenario import LoadedScenario


@dataclass(frozen=True)
class Injected:
    began_at: datetime
    in_place_at: datetime | None  # the fault's last change applied (None: it changed nothing)


def inject(ctx: Context, ls: LoadedScenario) -> Injected:
    ctx.progress("inject")
    ctx.rec.event("phase inject", kind=EventKind.PHASE)
    ctx.injected_at = utcnow()
    ctx.inject_seq = ctx.seq
    try:
        apply_actions(ctx, ls.scenario.inject, INJECT)
    except UserStepFailed as exc:
        # the fault is not what the scenario says: nothing after it can be judged
        ctx.rec.error(
            phase=Phase.INJECT,
            name=exc.label,
            expected="the injected step succeeds",
            observed=exc.run.observed,
            detail="cleanup undoes what ran",
        )
        raise ScenarioAborted from None
    return Injected(ctx.injected_at, ctx.fault_at)
