"""Expect: the failure the scenario predicts happens, with its signature, within its window.

Two kinds of failure: the target exits (its logs, exit code, start-up phase and state after the
restart policy are asserted), or it fails silently (only the probes show it)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from runner.labs.base import EventType, ExitInfo, LabEvent, LogLine, NodeState
from runner.labs.lifecycle import crash_loop_backoff_s
from runner.results.schema import EventKind, Phase
from runner.run.context import (
    LOAD_RECHECK_S,
    POLL_S,
    Context,
    ScenarioAborted,
    all_passed,
    first_exit,
    utcnow,
)
from runner.run.evidence import capture_evidence
from runner.spec import signature as sig
from runner.spec.expectations import FailureMode, NodeSignature, StateExpectation
from runner.spec.kinds import LogSource, NodeStatus
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import elapsed_real
from vllmfacts import startup


@dataclass(frozen=True)
class Expected:
    time_to_fail_s: float | None  # None: the failure did not show as predicted


def expect(ctx: Context, ls: LoadedScenario) -> Expected:
    ctx.rec.event("phase expect", kind=EventKind.PHASE)  # before it is said: an interrupt
    ctx.progress("expect: waiting for the failure")  # on the word is reported as in expect
    if ls.scenario.expect.failure is FailureMode.SILENT:
        return expect_silent(ctx, ls)
    return expect_exit(ctx, ls)


def expect_silent(ctx: Context, ls: LoadedScenario) -> Expected:
    """Nothing exits and nothing logs: the failure is what the probes see, and when."""
    exp = ls.scenario.expect
    assert ctx.injected_at is not None
    deadline = time.monotonic() + ctx.scale.window_deadline_lab(exp.time_to_fail)
    # Prometheus has no push API: look again after one (scaled) scrape interval
    results = ctx.poll_until(exp.probes, deadline, lambda: ctx.scrape_interval_lab)
    seen_at = utcnow()
    for r in results:
        ctx.rec.probe(Phase.EXPECT, r)
    capture_evidence(ctx, ls, "at the failure")
    if not all_passed(results):
        return Expected(None)
    start = ctx.fault_at or ctx.injected_at
    ttf = elapsed_real(ctx.scale, start, seen_at)
    ctx.rec.event("failure observed (silent: seen by the probes)", ts=seen_at, kind=EventKind.FAIL)
    # the target exits nothing, but another node may say why (a decode engine behind a proxy)
    for ns in exp.elsewhere:
        expect_elsewhere(ctx, ns, start)
    ctx.check_window(
        Phase.EXPECT,
        "expect: time to fail",
        exp.time_to_fail,
        ttf,
        f"{ttf:.1f} s real from the injection to the probes showing it",
        (start, seen_at),
    )
    return Expected(round(ttf, 3))


def expect_exit(ctx: Context, ls: LoadedScenario) -> Expected:
    exp = ls.scenario.expect
    assert exp.signature is not None
    failure = wait_failure(ctx, ls)
    start = failure.first_output_at or failure.started_at
    if ctx.injected_at is not None and start < ctx.injected_at:
        # a runtime failure: time it from the moment the fault was in place
        start = ctx.fault_at or ctx.injected_at
    ttf = elapsed_real(ctx.scale, start, failure.finished_at)
    ctx.rec.event(
        f"failure observed (exit {failure.code})",
        ts=failure.finished_at,
        source=f"lab:{ctx.target}",
        clock="lab runtime (exit time)",
        kind=EventKind.FAIL,
        node=ctx.target,
    )
    capture_evidence(ctx, ls, "at the failure")
    if exp.state is not None:
        expect_state(ctx, ls, exp.state)
    logs = logs_for(ctx, exp.signature.source, failure)
    ctx.rec.signature(
        Phase.EXPECT,
        "expect",
        sig.match(logs, exp.signature.in_order, exp.signature.absent),
        logs,
        node=ctx.target,
        source=f"{exp.signature.source.value} logs "
        f"({incarnation_label(ctx, failure, exp.signature.source)})",
    )
    expect_exit_facts(ctx, ls, failure, logs)
    in_lab = (failure.finished_at - start).total_seconds()
    ctx.check_window(
        Phase.EXPECT,
        "expect: time to fail",
        exp.time_to_fail,
        ttf,
        f"{ttf:.1f} s real ({in_lab:.3f} s in the lab, from first output (or the injection) to "
        "exit)",
        (start, failure.finished_at),
    )
    return Expected(round(ttf, 3))


def wait_failure(ctx: Context, ls: LoadedScenario) -> ExitInfo:
    """The first exit of the target since the injection, within the window from its first output
    (plus start-up); none is a failed expectation that ends the scenario."""
    exp = ls.scenario.expect
    window = ctx.scale.window_deadline_lab(exp.time_to_fail)
    t0, began = time.monotonic(), utcnow()
    budget = window + ctx.lab.start_cost_s

    def exited(_s: NodeState, evs: list[LabEvent]) -> bool:
        return first_exit(evs) is not None

    w = ctx.wait_for(exited, budget, replay_from=ctx.inject_seq, from_output=window)
    # the time the machine's CPUs were contended is waited for too (ctx.window_over)
    while not w.done and not ctx.window_over(began, budget):
        w = ctx.wait_for(exited, LOAD_RECHECK_S, replay_from=ctx.inject_seq)
    failure = first_exit(w.events)
    if failure is None:
        st = w.state
        output = "no output yet" if st.first_output_at is None else "writing output"
        judged = ctx.missed(began, budget)
        ctx.rec.verdict(
            phase=Phase.EXPECT,
            name="expect: failure happens",
            verdict=judged.verdict,
            expected=f"the target fails within {ctx.scale.describe(exp.time_to_fail)}",
            observed=f"no exit within {time.monotonic() - t0:.2f} lab s; node "
            f"{st.status.value}, ready={st.ready}, {output}" + judged.evidence,
        )
        raise ScenarioAborted
    return failure


def expect_state(ctx: Context, ls: LoadedScenario, want: StateExpectation) -> None:
    """The target's state once the restart policy has had its say (CrashLoopBackOff with so
    many restarts, or exited and never restarted)."""
    ttf_max = ls.scenario.expect.time_to_fail.max_s
    # restarts happen after back-off: allow for the back-off schedule, scaled
    backoff_real = sum(crash_loop_backoff_s(i) for i in range(want.min_restarts + 1))
    budget = ctx.scale.to_lab(backoff_real + ttf_max * (want.min_restarts + 1))
    # the state is awaited; the events are read only if it was never sampled, so a
    # crash loop seen in them does not end the wait while the policy's next restart is pending
    # (a recovery step applied then would meet that restart's incarnation)
    w = ctx.wait_for(
        lambda s, _: s.status is want.status and s.restarts >= want.min_restarts,
        budget + ctx.lab.restart_slack_s,
        replay_from=ctx.inject_seq,
    )
    st, how = w.state, "" if w.done else in_state(want, w.state, w.events)
    if want.max_restarts is not None:
        most = want.max_restarts
        # give the restart policy its first back-off to (wrongly) restart the node
        st = ctx.wait_for(
            lambda s, _: s.restarts > most, ctx.scale.to_lab(10) + ctx.scale.allowance_s
        ).state
        if st.status is not want.status:
            how = None
    ok = (
        how is not None
        and st.restarts >= want.min_restarts
        and (want.max_restarts is None or st.restarts <= want.max_restarts)
    )
    observed = f"{st.status.value} ({st.reason or 'no reason'}), restarts {st.restarts}"
    if how:
        observed = f"{how}; now {observed}"
    ctx.rec.check(
        phase=Phase.EXPECT,
        name="expect: state",
        ok=ok,
        expected=f"{want.status.value} with restarts >= {want.min_restarts}"
        + (f" and <= {want.max_restarts}" if want.max_restarts is not None else ""),
        observed=observed,
    )


def in_state(want: StateExpectation, st: NodeState, events: list[LabEvent]) -> str | None:
    """How the node was seen in the wanted state ("" when its state says so now), None when not.

    A crash loop is also seen in the node's events since the injection: a runtime whose back-off
    is short (Docker's restart policy waits 100 ms, then 200 ms, ...) is `restarting` only
    between two samples, so a node that failed, was restarted by its policy and is starting
    again is crash-looping though its state reads running at that moment."""
    if st.status is want.status and st.restarts >= want.min_restarts:
        return ""
    if want.status is not NodeStatus.CRASH_LOOPING:
        return None
    backoff = [e for e in events if e.type is EventType.BACKOFF]
    if any((e.restarts or 0) >= want.min_restarts for e in backoff):
        return f"crash_looping in the lab's events (a back-off at restarts {backoff[-1].restarts})"
    failures = sum(1 for e in events if e.failure is not None)
    if failures > want.min_restarts and st.restarts >= want.min_restarts:
        return (
            f"crash_looping in the lab's events ({failures} failed exits since the injection, "
            f"{st.restarts} restarts by the restart policy)"
        )
    return None


def expect_exit_facts(
    ctx: Context, ls: LoadedScenario, failure: ExitInfo, logs: list[LogLine]
) -> None:
    """The exit code, the start-up phase the log reached, the probes, and other nodes' lines."""
    exp = ls.scenario.expect
    if exp.exit_code is not None:
        ctx.rec.check(
            phase=Phase.EXPECT,
            name="expect: exit code",
            ok=failure.code == exp.exit_code,
            expected=f"exit code {exp.exit_code}",
            observed=f"exit code {failure.code}",
        )
    if exp.phase is not None:
        got = startup.reached(logs)
        ctx.rec.check(
            phase=Phase.EXPECT,
            name="expect: phase where it broke",
            ok=got is exp.phase,
            expected=exp.phase.value,
            observed=got.value,
            detail="the last vLLM start-up phase the failed incarnation's log reached",
        )
    for r in ctx.probe(exp.probes):
        ctx.rec.probe(Phase.EXPECT, r)
    for ns in exp.elsewhere:
        expect_elsewhere(ctx, ns, failure.finished_at)


def incarnation_label(ctx: Context, failure: ExitInfo, source: LogSource) -> str:
    """Whose log a signature was read in: the failed incarnation's, or, where the runtime
    dropped it before the lab read it, the one that stood in for it (logs_for), said so."""
    other = (
        ctx.lab.stood_in_by(ctx.target, failure.incarnation)
        if source is LogSource.PREVIOUS
        else None
    )
    if other is None:
        return f"incarnation {failure.incarnation}"
    return (
        f"incarnation {failure.incarnation}, whose log was gone before the lab read it (the "
        "kubelet keeps the current and the previous container's only): "
        f"incarnation {other}'s, the same pod's next failure with the same exit code"
    )


def logs_for(ctx: Context, source: LogSource, failure: ExitInfo) -> list[LogLine]:
    if source is LogSource.PREVIOUS:
        return ctx.lab.logs_of(ctx.target, failure.incarnation)
    return ctx.lab.logs(ctx.target, LogSource.CURRENT)


def expect_elsewhere(ctx: Context, ns: NodeSignature, after: datetime) -> None:
    """Lines another node must log after the failure (e.g. a worker's heartbeat complaint)."""
    deadline = time.monotonic() + ctx.scale.to_lab(ns.within_s) + ctx.scale.allowance_s
    while True:
        logs = [ln for ln in ctx.lab.logs(ns.node, ns.source) if ln.ts >= after]
        result = sig.match(logs, ns.in_order)
        if result.ok or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)  # logs are files: there is no event for a new line
    ctx.rec.signature(
        Phase.EXPECT,
        f"expect on {ns.node}",
        result,
        logs,
        node=ns.node,
        source=f"{ns.node} logs after the failure (within {ns.within_s:g} s real)",
    )
    if result.ok:
        first = next(r for r in result.in_order if r.line_index is not None)
        ts = logs[first.line_index or 0].ts
        ctx.rec.check(
            phase=Phase.EXPECT,
            name=f"expect on {ns.node}: within {ns.within_s:g} s",
            ok=True,
            expected=f"within {ns.within_s:g} s real of the failure",
            observed=f"{elapsed_real(ctx.scale, after, ts):.1f} s real after it",
        )
