"""Inject: the scenario's fault, applied (and journalled) on the lab."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.run.actions import apply_actions
from runner.run.context import Context, utcnow
from runner.scenario import LoadedScenario


@dataclass(frozen=True)
class Injected:
    began_at: datetime
    in_place_at: datetime | None  # the fault's last change applied (None: it changed nothing)


def inject(ctx: Context, ls: LoadedScenario) -> Injected:
    ctx.progress("inject")
    ctx.rec.event("phase inject")
    ctx.injected_at = utcnow()
    ctx.inject_seq = ctx.seq
    apply_actions(ctx, ls.scenario.inject, "inject")
    return Injected(ctx.injected_at, ctx.fault_at)
