"""Recover: the scenario's recovery steps in order. A step that `restores` must bring service
back (the node ready, then every verify probe passing) within the window; a step that does not
(a tempting shortcut) is let play out and must leave service down, with its own signature."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime

from runner.errors import GamedayError
from runner.labs.base import ExitInfo, LabEvent, NodeState
from runner.results.schema import EventKind, Phase, Verdict
from runner.run.apply import UserStepFailed, apply_actions
from runner.run.context import LOAD_RECHECK_S, Context, all_passed, utcnow
from runner.run.phases.expect import incarnation_label, logs_for
from runner.run.probing import ProbeResult
from runner.run.stepexec import StepRun
from runner.spec import signature as sig
from runner.spec.actions import Restart, SetArgs, SetEnv
from runner.spec.expectations import RecoveryStep
from runner.spec.kinds import Outcome
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import elapsed_real


@dataclass(frozen=True)
class Recovered:
    time_to_recover_s: float | None  # the last restoring step's; None: service not back


def recover(ctx: Context, ls: LoadedScenario) -> Recovered:
    sc = ls.scenario
    ctx.rec.event("phase recover", kind=EventKind.PHASE)
    ttr: float | None = None
    for i, step in enumerate(sc.recover, 1):
        ctx.progress(f"recover {i}/{len(sc.recover)}: {step.name}")
        label = f"recover {i}: {step.name}"
        if step.forbidden:
            ctx.rec.notes.append(f"FORBIDDEN shortcut - {step.name}: {step.forbidden}")
        st = ctx.caught_up()
        since, before = ctx.seq, Before(st.incarnation, utcnow(), serving=st.ready)
        # the other nodes the step restarts: a shortcut is judged once they serve again
        states = ctx.lab.states()
        others = {n: states[n].incarnation for n in _restarted(ctx, step) if n != ctx.target}
        runs = apply_step(ctx, step, label, f"recover {i}")
        applied_at = utcnow()  # what applying itself costs (a reload, a stop) does not scale
        if step.outcome is Outcome.RESTORES:
            ctx.restore_at, ctx.restored_at = applied_at, None
            ttr = verify(ctx, ls, label, applied_at, Why(before.at, runs))
        elif step.outcome is Outcome.MASKS:
            masks(ctx, ls, step, label)
        else:
            shortcut(ctx, ls, step, label, since, before, others)
    return Recovered(ttr)


def _restarted(ctx: Context, step: RecoveryStep) -> list[str]:
    """The nodes the step's actions restart (a restart, or a changed configuration applied)."""
    names: list[str] = []
    for a in step.actions:
        if isinstance(a, Restart):
            names += [n.name for name in a.nodes for n in ctx.lab.inventory.resolve(name)]
        elif isinstance(a, SetArgs | SetEnv):
            names.append(a.node)
    return list(dict.fromkeys(names))


def apply_step(ctx: Context, step: RecoveryStep, label: str, why: str) -> list[StepRun]:
    """Apply the step's actions; the runs of its user-written steps. One that fails stops the
    rest: for a step that `restores`, that is a failed assertion; for one that does not, a
    failing step is evidence for the claim, and passes. Either way the service is then checked."""
    try:
        return apply_actions(ctx, step.actions, why)
    except UserStepFailed as exc:
        restores = step.outcome is Outcome.RESTORES
        ctx.rec.check(
            phase=Phase.RECOVER,
            name=f"{label}: the step itself failed: {exc.label.removeprefix(why + ': ')}",
            ok=not restores,
            expected="the step runs as written"
            if restores
            else "a failing step is acceptable for a step that does not restore",
            observed=exc.run.observed,
        )
        return [exc.run]


# a line a program logs when something went wrong: a log level, or Python's exception line
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL|FATAL)\b|\b\w*(Error|Exception)\b:")
OUTPUT_TAIL_LINES = 20  # of a user-written step's output, in a failed assertion's detail
QUOTE_CHARS = 300  # of one quoted line in a one-line `observed`


@dataclass(frozen=True)
class Why:
    """What a report of service not coming back quotes: the target's log lines since the step
    began, and what the step's own commands and playbooks said."""

    since: datetime
    runs: list[StepRun]


def _quote(line: str) -> str:
    line = line.strip()
    return line if len(line) <= QUOTE_CHARS else line[: QUOTE_CHARS - 1] + "…"


def last_error_line(ctx: Context, st: NodeState, since: datetime) -> str | None:
    """The target's last line since `since` that reads as an error: its current incarnation's,
    or, where it does not serve, its last exited one's too (a crash loop's current incarnation
    may not have started yet). A serving node's earlier incarnations are not quoted: their
    errors are the fault's, not why the node serves and a probe fails."""
    incarnations = {st.incarnation}
    if not st.ready and st.last_exit is not None:
        incarnations.add(st.last_exit.incarnation)
    try:
        lines = [ln for i in incarnations for ln in ctx.lab.logs_of(ctx.target, i)]
    except GamedayError:  # evidence for a message: a log that cannot be read leaves it out
        return None
    lines = sorted((ln for ln in lines if ln.ts >= since), key=lambda ln: ln.ts)
    return next((ln.text for ln in reversed(lines) if ERROR_LINE.search(ln.text)), None)


def not_restored(
    ctx: Context, st: NodeState, ready_in_time: bool, results: list[ProbeResult], why: Why
) -> tuple[str, str]:
    """Why service did not come back, as the one line a terminal and JUnit show (the node's
    state, its last error line, each failing probe and what it got, the last line the step's
    own commands printed) and a detail (the tail of each step's output)."""
    parts = [f"not restored: node {st.status.value}, ready={st.ready}"]
    if (err := last_error_line(ctx, st, why.since)) is not None:
        parts.append(f"its last error line: {_quote(err)}")
    if not ready_in_time:
        parts.append("not ready within the window, so no probe ran")
    parts += [
        f"probe {r.name} failed: {_quote(r.observed)}"
        for r in results
        if r.verdict is not Verdict.PASSED
    ]
    said = [run for run in why.runs if run.output.strip()]
    parts += [f"the step's last output: {_quote(_last_line(run.output))}" for run in said]
    detail = "\n\n".join(
        "the step's output (its last lines):\n"
        + "\n".join(run.output.rstrip().splitlines()[-OUTPUT_TAIL_LINES:])
        for run in said
    )
    return "; ".join(parts), detail


def _last_line(output: str) -> str:
    return next((ln for ln in reversed(output.splitlines()) if ln.strip()), "")


def verify(
    ctx: Context, ls: LoadedScenario, label: str, applied_at: datetime, why: Why
) -> float | None:
    """Service back: the node ready, then every verification probe passing, within the window."""
    v = ls.scenario.verify
    ctx.rec.event(f"phase verify ({label})", kind=EventKind.PHASE)
    window = ctx.scale.window_deadline_lab(v.time_to_recover)
    deadline_lab = window + ctx.lab.start_cost_s
    t0, began = time.monotonic(), utcnow()
    t_end = t0 + deadline_lab
    gen0 = ctx.lab.states()[ctx.target].generation

    def serving(s: NodeState, _evs: list[LabEvent]) -> bool:
        return s.ready and s.generation >= gen0

    w = ctx.wait_for(serving, deadline_lab, from_output=window)
    # the time the machine's CPUs were contended is waited for too (ctx.window_over)
    while not w.done and not ctx.window_over(began, deadline_lab):
        w = ctx.wait_for(serving, LOAD_RECHECK_S)
    results = []
    if w.done:
        # a start that outlasted its allowance leaves the probes what the window has left
        t_end = max(t_end, time.monotonic() + ctx.starting_for(w.state, window))
        # a lab event wakes this at once; what no event announces (an HTTP answer, Prometheus's
        # next scrape) is looked at again after one scaled scrape interval (at most 1 s)
        results = ctx.poll_until(
            v.probes,
            t_end,
            lambda: min(1.0, ctx.scrape_interval_lab, max(t_end - time.monotonic(), 0.01)),
            until_event=True,
        )
        again = min(1.0, ctx.scrape_interval_lab)
        while not all_passed(results) and not ctx.window_over(began, t_end - t0):
            results = ctx.poll_until(
                v.probes, time.monotonic() + again, lambda: again, until_event=True
            )
    passed_at = utcnow() if w.done and all_passed(results) else None
    observed, detail = (
        ("restored", "") if passed_at else not_restored(ctx, w.state, w.done, results, why)
    )
    # service not back in a window the machine's load shortened is not judged, nor are the
    # probes that found it not back
    judged = ctx.missed(began, t_end - t0) if passed_at is None else None
    missed = judged.verdict if judged else Verdict.FAILED
    ctx.rec.verdict(
        phase=Phase.RECOVER,
        name=f"{label}: restores service",
        verdict=Verdict.PASSED if passed_at else missed,
        expected="ready, then every verification probe passes",
        observed=observed + (judged.evidence if judged else ""),
        detail=detail,
    )
    for r in results:
        ok = r.verdict is Verdict.PASSED
        ctx.rec.probe(Phase.VERIFY, r, verdict=Verdict.PASSED if ok else missed)
    if passed_at is None:
        return None
    state = ctx.lab.states()[ctx.target]
    # from the step (or, if it restarted the node, from the new incarnation's first output:
    # the interpreter's own start does not scale)
    restarted = state.first_output_at is not None and state.first_output_at > applied_at
    start = state.first_output_at if restarted and state.first_output_at else applied_at
    ttr = elapsed_real(ctx.scale, start, passed_at)
    ctx.restored_at = passed_at
    ctx.rec.event("service verified (health and inference)", ts=passed_at, kind=EventKind.RESTORED)
    since = "first output of the new incarnation" if restarted else "the step applied"
    ctx.check_window(
        Phase.VERIFY,
        "verify: time to recover",
        v.time_to_recover,
        ttr,
        f"{ttr:.1f} s real ({since} -> probes pass)",
        (start, passed_at),
    )
    return round(ttr, 3)


@dataclass(frozen=True)
class Before:
    """The target as a recovery step found it: its incarnation, whether it was serving, and the
    time the step began."""

    incarnation: int
    at: datetime
    serving: bool = True

    def failed_after(self, events: list[LabEvent]) -> ExitInfo | None:
        """The first failure the step can be judged by: of an incarnation started since, or,
        where the node was serving when the step began, an exit after that. A crash-looping
        node's exit that the runner reads only after the step began (events arrive late), the
        restart its policy had pending, or its running incarnation crashing while the step is
        applied, is the fault's, not the step's."""
        return next(
            (
                f
                for e in events
                if (f := e.failure) is not None
                and (
                    f.incarnation > self.incarnation or (self.serving and f.finished_at >= self.at)
                )
            ),
            None,
        )


def shortcut(
    ctx: Context,
    ls: LoadedScenario,
    step: RecoveryStep,
    label: str,
    since: int,
    before: Before,
    others: dict[str, int] | None = None,
) -> None:
    """A step expected NOT to restore service: let it play out, then show that it did not.
    `others`: the other nodes it restarts, by their incarnation before it; it has played out
    once each serves in a later one (a decode engine restarted behind a proxy that is ready
    throughout)."""
    others = others or {}
    settle = step.settle_s or ls.scenario.verify.time_to_recover.max_s
    budget = ctx.scale.to_lab(settle) + ctx.scale.allowance_s
    gen0 = ctx.lab.states()[ctx.target].generation

    # A step with a failure signature is awaited until it fails; otherwise until it fails or
    # the node serves again (then the probes decide).
    def settled(s: NodeState, evs: list[LabEvent]) -> bool:
        if before.failed_after(evs) is not None:
            return True
        if not (step.expect is None and s.ready and s.generation >= gen0):
            return False
        now = ctx.lab.states() if others else {}
        return all(now[n].ready and now[n].incarnation > inc for n, inc in others.items())

    w = ctx.wait_for(settled, budget, replay_from=since)
    failure = before.failed_after(w.events)
    results = ctx.probe(ls.scenario.verify.probes)
    restored = all_passed(results)
    how = (
        f"node failed again (exit {failure.code})"
        if failure
        else f"node {w.state.status.value}, ready={w.state.ready}"
    )
    ctx.rec.check(
        phase=Phase.RECOVER,
        name=f"{label}: does NOT restore service",
        ok=not restored,
        expected="service still down after this step" + (f" ({step.why})" if step.why else ""),
        observed="; ".join(
            [
                "restored (the shortcut worked, so the scenario's claim is wrong)"
                if restored
                else f"not restored: {how}",
                *(f"{r.name}: {r.observed}" for r in results),
            ]
        ),
    )
    if step.expect is None:
        return
    if failure is None:
        ctx.rec.check(
            phase=Phase.RECOVER,
            name=f"{label}: signature",
            ok=False,
            expected="the failure signature of this step",
            observed="the node did not fail",
        )
        return
    logs = logs_for(ctx, step.expect.source, failure)
    ctx.rec.signature(
        Phase.RECOVER,
        label,
        sig.match(logs, step.expect.in_order),
        logs,
        node=ctx.target,
        source=f"logs of {incarnation_label(ctx, failure, step.expect.source)}",
    )


def masks(ctx: Context, ls: LoadedScenario, step: RecoveryStep, label: str) -> None:
    """A step that hides the symptom: the verification probes pass after it; then its `reveal`
    actions put the original setting back and the expectation's probes show the fault again.
    Reported as `masks`: neither restores nor does not."""
    sc = ls.scenario
    window = sc.verify.time_to_recover
    deadline_lab = ctx.scale.window_deadline_lab(window) + ctx.lab.start_cost_s
    t_end = time.monotonic() + deadline_lab
    gen0 = ctx.lab.states()[ctx.target].generation
    w = ctx.wait_for(lambda s, _: s.ready and s.generation >= gen0, deadline_lab)
    hidden = w.done and all_passed(
        ctx.poll_until(sc.verify.probes, t_end, lambda: ctx.scrape_interval_lab, until_event=True)
    )
    ctx.rec.check(
        phase=Phase.RECOVER,
        name=f"{label}: masks the symptom (the probes pass)",
        ok=hidden,
        expected="every verification probe passes after the step"
        + (f" ({step.why})" if step.why else ""),
        observed="they pass" if hidden else f"they do not: node ready={w.state.ready}",
    )
    gen1 = ctx.lab.states()[ctx.target].generation
    apply_actions(ctx, step.reveal, f"{label}: reveal")
    deadline_lab = ctx.scale.window_deadline_lab(sc.expect.time_to_fail) + ctx.lab.start_cost_s
    t_end = time.monotonic() + deadline_lab
    # the original setting starts a new incarnation: the probes look at that one, whether it
    # serves (a silent fault) or not
    ctx.wait_for(lambda s, _: s.generation > gen1, deadline_lab)
    results = ctx.poll_until(sc.expect.probes, t_end, lambda: ctx.scrape_interval_lab)
    back = all_passed(results)
    if hidden and back:
        ctx.rec.notes.append(
            f"MASKS - {step.name}: the probes passed after it and the fault came back once the "
            "original setting was restored; it hides the symptom, the cause is still there"
        )
    ctx.rec.check(
        phase=Phase.RECOVER,
        name=f"{label}: masks, the fault is back once the original setting is restored",
        ok=back,
        expected="the expectation's probes show the fault again",
        observed="; ".join(f"{r.name}: {r.observed}" for r in results),
    )
