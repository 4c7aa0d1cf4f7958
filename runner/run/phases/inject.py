"""Inject: the scenario's fault, applied (and journalled) on the lab."""

from __future__ import annotations

from runner.run.actions import apply_actions
from runner.run.context import Context, utcnow
from runner.scenario import LoadedScenario


def inject(ctx: Context, ls: LoadedScenario) -> None:
    ctx.progress("inject")
    ctx.rec.event("phase inject")
    ctx.injected_at = utcnow()
    ctx.inject_seq = ctx.seq
    apply_actions(ctx, ls.scenario.inject, "inject")
