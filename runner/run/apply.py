"""Carrying out a scenario's actions (inject, or a recovery step) on the lab: every change is
journalled before it is applied and undone by `undo_all`."""

from __future__ import annotations

import secrets
import time
from datetime import datetime

import httpx

from runner.errors import LabError
from runner.labs.base import Change, ChangeKind
from runner.labs.common.planning import describe_change, plan_change
from runner.results.schema import Evidence, EvidenceLine, Phase
from runner.run.context import POLL_S, Context, utcnow
from runner.run.journal import OpenStep
from runner.run.stepexec import OnEvent, StepRun, run_step, run_undo, step_env
from runner.run.undo import baseline_notes, reapply_baseline, unwind
from runner.spec.actions import (
    GPU_PROCESS_NAMES,
    Action,
    Program,
    Restart,
    Rollback,
    Signal,
    SignalName,
    StartProcess,
    Traffic,
    Wait,
)
from runner.spec.usersteps import Command, Http, HttpStep, Playbook, UserStep, describe_user_step

GPU_HOLD_TIMEOUT_S = 30.0  # wall seconds a started program has to take its GPU memory
# wall seconds Prometheus has to scrape a new scrape configuration's targets, beyond two of
# its scrape intervals: its discovery hands them over within 5 s, whatever the time scale
SCRAPED_AFTER_RELOAD_S = 30.0


SETUP = "setup"  # the baseline's setup: the scenario's starting configuration
INJECT = "inject"
# Actions applied as these keep a user-written step's own undo (journalled, run at cleanup):
# both put the lab in a state the scenario chose. Recovery steps are undone by the baseline.
KEEP_UNDO = (SETUP, INJECT)


def apply_actions(ctx: Context, actions: list[Action], why: str) -> list[StepRun]:
    """Carry out the actions in order; the runs of the user-written steps among them (a report
    that service did not come back quotes what the team's own step said)."""
    runs: list[StepRun] = []
    for action in actions:
        began = utcnow()
        broke: datetime | None = None  # when a GPU XID's program broke the device
        if isinstance(action, Rollback):
            t0 = time.monotonic()
            undone = undo_all(ctx, reason=why)
            if any(u.kind is ChangeKind.SCRAPE_TARGETS for u in undone):
                # a recovery's rollback has taken effect once Prometheus scrapes what it restored
                scraped(ctx)
                note_prometheus_load(ctx, time.monotonic() - t0)
        elif isinstance(action, Restart):
            restart(ctx, action, why)
        elif isinstance(action, Signal):
            ctx.rec.event(
                f"{why}: SIG{action.signal.value} to {action.node}'s "
                f"{action.process.replace('_', ' ')}"
            )
            ctx.lab.signal(action.node, action.process, action.signal)
            if action.signal is SignalName.STOP:
                ctx.stopped.add(action.node)
        elif isinstance(action, Traffic):
            send_traffic(ctx, action, why)
        elif isinstance(action, Wait):
            ctx.rec.event(f"{why}: wait, nothing done ({action.why})")
        elif isinstance(action, Command | Playbook | Http):
            runs.append(user_step(ctx, action, why))
        else:
            record_and_apply(ctx, plan_change(ctx.lab, action), why)
            # a GPU program counts as started once it holds its memory; an XID's program once
            # the device is broken (its fault takes the engine down at the next request)
            if isinstance(action, StartProcess) and action.program in GPU_PROCESS_NAMES:
                wait_holds_gpu(ctx, action)
            if isinstance(action, StartProcess) and action.program is Program.GPU_XID:
                ctx.kernel_logged.add(action.node)
                broke = wait_device_broken(ctx, action, began)
        if why == INJECT and not isinstance(action, Traffic | Wait):
            # a GPU XID breaks the device the moment its program runs, somewhere inside the
            # host action (an Ansible play takes seconds): its fault is in place when the node
            # says the device broke
            ctx.fault_at = broke or utcnow()
            ctx.fault_began_at = ctx.fault_began_at or ctx.fault_at
    return runs


def restart(ctx: Context, action: Restart, why: str) -> None:
    nodes = [n.name for name in action.nodes for n in ctx.lab.inventory.resolve(name)]
    ctx.rec.event(
        f"{why}: restart {', '.join(nodes)} ({'together' if action.together else 'one by one'})"
    )
    if action.together:
        ctx.lab.restart(nodes)
    else:
        for n in nodes:
            ctx.lab.restart([n])
    ctx.stopped.difference_update(nodes)


def wait_holds_gpu(ctx: Context, action: StartProcess) -> None:
    """A program counts as started once it holds what it exists to hold: for a GPU program,
    its memory on the node's GPU (nvidia-smi lists it under its process name)."""
    name = GPU_PROCESS_NAMES[action.program]
    deadline = time.monotonic() + GPU_HOLD_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(name in p.name for p in ctx.lab.gpu_processes(action.node)):
            ctx.rec.event(f"{action.node}: {action.name} holds GPU memory")
            return
        time.sleep(POLL_S)  # the GPU list has no events
    raise LabError(
        f"{action.name} on {action.node} did not take GPU memory within {GPU_HOLD_TIMEOUT_S:g} s"
    )


def wait_device_broken(ctx: Context, action: StartProcess, began: datetime) -> datetime:
    """An XID's program counts as started once the device is broken: when that happened, on the
    node's clock (the fault it holds says), not when the host action that started it ended."""
    deadline = time.monotonic() + GPU_HOLD_TIMEOUT_S
    while time.monotonic() < deadline:
        at = ctx.lab.xid_broke_at(action.node)
        if at is not None and at >= began:  # an earlier run's fault file is not this one's
            ctx.rec.event(f"{action.node}: {action.name} broke the GPU", ts=at)
            return at
        time.sleep(POLL_S)
    raise LabError(
        f"{action.name} on {action.node} did not break the node's GPU within "
        f"{GPU_HOLD_TIMEOUT_S:g} s (no XID fault held in its GPU state)"
    )


def record_and_apply(ctx: Context, change: Change, why: str) -> None:
    seq = ctx.journal.record(ctx.scenario_id, change)  # on disk before it is applied
    ctx.open_changes.append((seq, change))
    ctx.rec.event(f"{why}: {describe_change(change)}")
    if change.note and change.kind is ChangeKind.NODE_CONFIG:
        ctx.rec.notes.append(change.note)
    t0 = time.monotonic()
    ctx.lab.apply(change)
    if change.kind is ChangeKind.SCRAPE_TARGETS:
        # a step that changes what Prometheus scrapes has taken effect once it scrapes that
        scraped(ctx)
        note_prometheus_load(ctx, time.monotonic() - t0)


def scraped(ctx: Context) -> None:
    """Wait until Prometheus has scraped the targets of its new configuration: its discovery
    hands them over within 5 s whatever the time scale, and it scrapes them within a scrape
    interval, which is the lab's."""
    ctx.lab.monitoring_ready(SCRAPED_AFTER_RELOAD_S + 2 * ctx.scrape_interval_lab)


def note_prometheus_load(ctx: Context, seconds: float) -> None:
    """A new scrape configuration costs Prometheus's discovery up to 5 s of wall time, whatever
    the time scale: say so in the timeline, where it would otherwise look like the runner's."""
    ctx.rec.event(
        f"configuration reloaded, every target scraped {seconds:.2f} s later", source="prometheus"
    )


def send_traffic(ctx: Context, action: Traffic, why: str) -> None:
    """Requests as users send them; a failure is the point, so outcomes are only recorded."""
    node = action.node or ctx.target
    ctx.wait_for(lambda s, _: s.ready, ctx.boot_timeout_lab, node=node)
    url = ctx.lab.url(node)
    for req in action.requests:
        body = {"messages": [{"role": "user", "content": req.prompt}], "max_tokens": req.max_tokens}
        try:
            r = ctx.http.post(
                url + "/v1/chat/completions", json=body, timeout=max(30 / ctx.scale.scale, 1.0)
            )
            outcome = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        ctx.rec.event(f"{why}: traffic ({len(req.prompt)} chars) -> {outcome}")


def ansible_event(ctx: Context) -> OnEvent:
    """A playbook's task result, as a timeline entry of its own source."""

    def event(text: str, ts: datetime | None) -> None:
        ctx.rec.event(text, ts=ts, source="ansible", clock="ansible (UTC)")

    return event


class UserStepFailed(LabError):
    """A user-written step did not do what it was to do (exit, output, status, time)."""

    def __init__(self, label: str, run: StepRun) -> None:
        super().__init__(f"{label}: {run.observed}")
        self.label = label
        self.run = run


def user_step(ctx: Context, step: UserStep, why: str) -> StepRun:
    """Journal it (its undo, or a baseline re-apply at cleanup), then run it; UserStepFailed
    when it fails. Its output is evidence; a playbook's task results go on the timeline."""
    what = describe_user_step(step)
    undo = step.undo if why in KEEP_UNDO else None
    if isinstance(undo, HttpStep) and undo.node is None:
        undo = undo.model_copy(update={"node": ctx.target})  # `gameday cleanup` has no target
    reason = (
        f"an injected {step.kind} has no undo"
        if why == INJECT
        else f"a setup {step.kind} has no undo"
        if why == SETUP
        else f"{why} ran a {step.kind}, which may change the lab behind the journal's back"
    )
    mark = secrets.token_hex(12)  # journalled first: cleanup finds the step's processes by it
    seq = ctx.journal.record_step(ctx.scenario_id, ctx.folder, what, undo, reason, mark)
    folder = ctx.folder.resolve()
    ctx.open_steps.append(
        OpenStep(ctx.journal.path, seq, ctx.scenario_id, folder, what, undo, reason, mark)
    )
    ctx.rec.event(f"{why}: {what}")

    run = run_step(
        step,
        folder=folder,
        env=step_env(ctx.lab.facts(), ctx.scenario_id, {}),
        inventory=ctx.lab.inventory.path,
        url_of=ctx.lab.url,
        target=ctx.target,
        client=ctx.http,
        on_event=ansible_event(ctx),
        mark=mark,
    )
    ctx.rec.event(f"{why}: {step.name or step.kind}: {run.observed}")
    if run.output:
        lines = [EvidenceLine(ts=None, text=ln) for ln in run.output.splitlines()]
        ctx.rec.evidence.append(Evidence(title=f"{why}: {what}: output", lines=lines))
    if not run.ok:
        raise UserStepFailed(f"{why}: {what}", run)
    return run


def undo_all(ctx: Context, reason: str) -> list[Change]:
    """Put every node this run changed back to how it was before its first change, newest
    first, running the undos of its user-written steps in their place among the changes
    (runner.run.undo.unwind); then, if a user step ran without an undo, re-apply the baseline where
    a node differs from it. Returns the undos applied."""

    def applied(undo: Change, _seconds: float) -> None:
        # an undone scrape configuration is not waited for: a later scenario that uses
        # Prometheus waits for its scrape before its injection (baseline.monitoring_scraping)
        ctx.rec.event(f"{reason}: restore {describe_change(undo)}")

    failed: dict[int, str] = {}  # journal sequence number -> what the report says

    def undo_step(step: OpenStep) -> None:
        if isinstance(step.undo, HttpStep) and step.undo.node:
            # an admin endpoint answers once its node serves again after the undos so far
            ctx.wait_for(lambda s, _: s.ready, ctx.boot_timeout_lab, node=step.undo.node)
        ok, line = run_undo(ctx.lab, step, ctx.http, ansible_event(ctx), reason)
        ctx.rec.event(f"{reason}: {line}")
        ctx.rec.notes.append(line)
        if not ok:
            failed[step.seq] = line

    done = unwind(ctx.lab, ctx.open_changes, ctx.open_steps, undo_step, f"undo ({reason})", applied)
    reasons = list(dict.fromkeys(s.reason for s in ctx.open_steps if s.undo is None))
    if reasons:
        again = reapply_baseline(ctx.lab, applied)
        ctx.rec.notes += baseline_notes(again, reasons, reason, undone=done)
        done += again
    for seq, _ in reversed(ctx.open_changes):
        ctx.journal.undone(seq)
    for s in ctx.open_steps:
        if s.seq not in failed:
            ctx.journal.undone(s.seq)
    ctx.open_changes.clear()
    ctx.open_steps.clear()
    if failed:
        ctx.rec.error(
            phase=Phase.CLEANUP,
            name=f"{reason}: undo of user-written steps",
            expected="every undo step succeeds",
            observed="; ".join(failed.values()),
            detail="the failed undos stay journalled: `gameday cleanup` runs them again",
        )
    return done
