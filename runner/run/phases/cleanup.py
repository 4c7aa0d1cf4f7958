"""Cleanup, which runs whatever happened (Ctrl-C included): undo every change this scenario
made and get the baseline serving again."""

from __future__ import annotations

from dataclasses import dataclass

from runner.errors import GamedayError
from runner.labs import group_restart_needed, restart_scope
from runner.labs.base import Change, ChangeKind, NodeState
from runner.results.schema import EventKind, Phase
from runner.run.apply import undo_all
from runner.run.context import Context

SELF_HEAL_S = 30.0  # real seconds a target gets to come back by itself before its group restarts


@dataclass(frozen=True)
class Cleaned:
    undone: list[Change]  # the undos applied
    restarted: list[str]  # the group restarted together (empty: none)
    serving: bool  # the target serves at baseline again


def cleanup(ctx: Context) -> Cleaned:
    """If the target does not come back on its own (a head that exited 0 is not restarted by
    its policy), restart its whole group together, as the runbook says."""
    ctx.progress("cleanup")
    ctx.rec.event("phase cleanup", kind=EventKind.PHASE)
    undone: list[Change] = []
    try:
        undone = undo_all(ctx, "cleanup")
        for node in sorted(ctx.kernel_logged):
            # the GPU's reset keeps the kernel log's lines, and its alert pages for hours: the
            # next run on this lab starts from a node as booted, whose watch has counted nothing
            ctx.lab.reboot_kernel_log(node)
            ctx.rec.event(f"cleanup: {node}'s kernel log as after a reboot (its XID lines gone)")
        ctx.kernel_logged.clear()
        if ctx.stopped:
            restarted, st = restart_stopped(ctx)
        elif ctx.lab.states()[ctx.target].ready:
            return Cleaned(undone, [], True)
        else:
            restarted, st = rejoin(ctx, undone)
        ctx.rec.event(
            "baseline serving again"
            if st.ready
            else f"baseline NOT ready after cleanup ({st.status.value})"
        )
        if not st.ready:
            ctx.rec.error(
                phase=Phase.CLEANUP,
                name="cleanup: baseline restored",
                expected="the target serves again at baseline",
                observed=f"{st.status.value}, ready={st.ready}",
            )
        return Cleaned(undone, restarted, st.ready)
    except GamedayError as exc:
        ctx.rec.error(
            phase=Phase.CLEANUP,
            name="cleanup: baseline restored",
            expected="the lab back at baseline",
            observed=f"cleanup failed: {exc}",
            detail="run `gameday cleanup` to undo what is left",
        )
        return Cleaned(undone, [], False)


def restart_stopped(ctx: Context) -> tuple[list[str], NodeState]:
    """A stopped engine looks ready (its /health answers 200) and never comes back by itself:
    restart the groups of the nodes this run stopped, together."""
    group = sorted({n for node in ctx.stopped for n in restart_scope(ctx.lab.inventory, node)})
    ctx.rec.event(f"cleanup: restart {', '.join(group)} together (an engine left stopped)")
    ctx.lab.restart(group)
    ctx.stopped.clear()
    return group, ctx.wait_for(lambda s, _: s.ready, ctx.boot_timeout_lab).state


def rejoin(ctx: Context, undone: list[Change]) -> tuple[list[str], NodeState]:
    """Give the target its chance to come back by itself, unless part of its group was
    re-applied alone; then restart its group together. Returns the group if restarted, and the
    target's state as the wait ended."""
    group = restart_scope(ctx.lab.inventory, ctx.target)
    reapplied = {c.node for c in undone if c.kind is ChangeKind.NODE_CONFIG}
    if not group_restart_needed(group, reapplied):
        settle = ctx.scale.to_lab(SELF_HEAL_S) + ctx.scale.allowance_s
        healed = ctx.wait_for(lambda s, _: s.ready, settle)
        if healed.done:
            return [], healed.state
    ctx.rec.event(f"cleanup: restart {', '.join(group)} together")
    ctx.lab.restart(group)
    return group, ctx.wait_for(lambda s, _: s.ready, ctx.boot_timeout_lab).state
