"""One scenario on one lab, phase by phase:

    baseline -> inject -> expect -> detect -> recover (+ verify) -> cleanup (always)

Every change is journalled before it is applied (runner.journal) and undone in `cleanup`, which
runs whatever happens, Ctrl-C included. Waiting is driven by the lab's event stream; times come
from the lab's own clocks (process start, first output, exit) and are converted to real-world
seconds with the lab's time scale (runner.timing).
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from runner import prometheus, startup
from runner import signature as sig
from runner.errors import GamedayError, LabError
from runner.inventory import Node
from runner.journal import Journal
from runner.labs import restart_scope
from runner.labs.base import (
    Change,
    ChangeKind,
    EventType,
    ExitInfo,
    LabDriver,
    LabEvent,
    LogLine,
    NodeConfig,
    NodeState,
    ProcessState,
    Value,
)
from runner.probes import Probe, ProbeEnv, ProbeResult, ProbeVerdict, run_probes
from runner.results import (
    Assertion,
    Evidence,
    EvidenceLine,
    ScenarioResult,
    TimelineEvent,
    Verdict,
    combine,
)
from runner.scenario import (
    PROGRAMS,
    Action,
    ChangeAddress,
    FailureMode,
    GpuProcessesProbe,
    LoadedScenario,
    LogSource,
    NodeSignature,
    Outcome,
    Pattern,
    RecoveryStep,
    Restart,
    Rollback,
    ScrapeTargets,
    ServiceLinks,
    SetArgs,
    SetEnv,
    Signal,
    StartProcess,
    StopProcess,
    TargetsProbe,
    Traffic,
    Window,
)
from runner.timing import TimeScale, elapsed_real
from runner.undo import restore

Progress = Callable[[str], None]
LOG_POLL_S = 0.05  # how often to re-read a log that must gain a line
# Lab seconds allowed on top of a converted window for what does not scale: starting an
# interpreter, importing, stopping the previous incarnation.
START_COST_S = 3.0


def utcnow() -> datetime:
    return datetime.now(UTC)


class ScenarioAborted(Exception):
    """Stop this scenario's remaining phases (the reason is already recorded)."""


@dataclass
class Recorder:
    assertions: list[Assertion] = field(default_factory=list)
    timeline: list[TimelineEvent] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def event(
        self,
        event: str,
        *,
        ts: datetime | None = None,
        source: str = "runner",
        clock: str = "runner (UTC)",
    ) -> None:
        self.timeline.append(
            TimelineEvent(ts=ts or utcnow(), source=source, clock=clock, event=event)
        )

    def check(
        self, phase: str, name: str, ok: bool | None, expected: str, observed: str, detail: str = ""
    ) -> bool:
        verdict = Verdict.ERROR if ok is None else (Verdict.PASSED if ok else Verdict.FAILED)
        self.assertions.append(
            Assertion(
                name=name,
                phase=phase,
                verdict=verdict,
                expected=expected,
                observed=observed,
                detail=detail,
            )
        )
        return bool(ok)


@dataclass
class Context:
    lab: LabDriver
    scale: TimeScale
    journal: Journal
    scenario_id: str
    target: str
    progress: Progress
    rec: Recorder
    http: httpx.Client
    open_changes: list[tuple[int, Change]] = field(default_factory=list)
    seq: int = 0
    injected_at: datetime | None = None  # the injection began
    # the injected fault is in place: its last change applied (a playbook or a container
    # re-create takes seconds of wall time that the failure must not be charged with)
    fault_at: datetime | None = None
    # its first change in place: an alert may fire on that alone (one node of two moved)
    fault_began_at: datetime | None = None
    inject_seq: int = 0
    time_to_detect: float | None = None

    def wait(
        self,
        done: Callable[[NodeState, list[LabEvent]], bool],
        lab_timeout: float,
        *,
        node: str | None = None,
        replay_from: int | None = None,
    ) -> tuple[NodeState, list[LabEvent], bool]:
        """Block on the lab's events until `done(state of node, its events)` or timeout.
        `replay_from`: also count the node's events since that sequence number."""
        node = node or self.target
        deadline = time.monotonic() + lab_timeout
        seen: list[LabEvent] = []
        if replay_from is not None and replay_from < self.seq:
            seen = [
                e
                for e in self.lab.wait_events(replay_from, 0)
                if e.seq <= self.seq and e.node == node
            ]
        while True:
            st = self.lab.states()[node]
            if done(st, seen):
                return st, seen, True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return st, seen, False
            evs = self.lab.wait_events(self.seq, min(remaining, 5.0))
            if evs:
                self.seq = evs[-1].seq
                for e in evs:
                    self.note_event(e)
                seen += [e for e in evs if e.node == node]

    def note_event(self, e: LabEvent) -> None:
        text = e.type.value
        if e.type is EventType.EXITED:
            code, inc = e.data.get("code"), e.data.get("incarnation")
            text = f"exited with code {code} (incarnation {inc})"
            if e.data.get("stopped"):
                text = f"stopped by the lab to re-apply (exit {code}, incarnation {inc})"
                if e.data.get("stop_requested_at"):
                    asked = datetime.fromisoformat(e.data["stop_requested_at"])
                    took = (e.ts - asked).total_seconds()
                    text = text[:-1] + f", {took:.3f} s after SIGTERM)"
            ts = datetime.fromisoformat(e.data["finished_at"])
            self.rec.event(text, ts=ts, source=f"lab:{e.node}", clock="lab runtime (exit time)")
            return
        if e.type is EventType.BACKOFF:
            text = f"back-off {e.data.get('delay_s', 0):.3f} s (restarts {e.data.get('restarts')})"
        elif e.type is EventType.STARTED:
            text = f"started incarnation {e.data.get('incarnation')} pid {e.data.get('pid')}"
        self.rec.event(text, ts=e.ts, source=f"lab:{e.node}", clock="lab runtime (UTC)")


# ---- the run -----------------------------------------------------------------------------------


def run_scenario(
    ls: LoadedScenario, lab: LabDriver, journal: Journal, progress: Progress
) -> ScenarioResult:
    sc = ls.scenario
    rec = Recorder()
    started = utcnow()
    spec = lab.inventory.lab
    scale = TimeScale(spec.time_scale, spec.timing_allowance_s)
    note = sc.lab_notes.get(lab.kind)
    if note:
        rec.notes.append(f"{lab.kind.value} lab: {note}")
    ttf: float | None = None
    ttr: float | None = None
    http = http_client()  # one client for every scenario of the process
    ctx = Context(
        lab=lab,
        scale=scale,
        journal=journal,
        scenario_id=sc.metadata.id,
        target=sc.target,
        progress=progress,
        rec=rec,
        http=http,
        seq=lab.last_event_seq(),
    )
    try:
        if not lab.inventory.resolve(sc.target):
            raise LabError(
                f"scenario target {sc.target!r} is not a host or group of {lab.inventory.path}"
            )
        baseline(ctx, ls)
        ttf = inject_and_expect(ctx, ls)
        detect(ctx, ls)
        ttr = recover(ctx, ls)
    except ScenarioAborted:
        pass
    except GamedayError as exc:
        rec.check("run", "lab", None, "the lab carries out the scenario", str(exc))
    except Exception as exc:  # a bug or an unmapped error: this scenario's verdict is `error`
        rec.check(
            "run",
            "lab",
            None,
            "the lab carries out the scenario",
            f"{type(exc).__name__}: {exc}",
            detail="".join(traceback.format_exception(exc)),
        )
    finally:
        with shielded_from_sigint():
            cleanup(ctx)
    verdict = combine([a.verdict for a in rec.assertions])
    return ScenarioResult(
        id=sc.metadata.id,
        title=sc.metadata.title,
        file=str(ls.path),
        lab=spec.name,
        verdict=verdict,
        time_to_fail_s=ttf,
        time_to_recover_s=ttr,
        time_to_detect_s=ctx.time_to_detect,
        started_at=started,
        finished_at=utcnow(),
        assertions=rec.assertions,
        timeline=sorted(rec.timeline, key=lambda e: e.ts),
        evidence=rec.evidence,
        notes=rec.notes,
    )


@functools.cache
def http_client() -> httpx.Client:
    """The probes' HTTP client, one per process: building one reads and parses the CA bundle
    (30 ms of CPU per scenario in the profile of a suite run). httpx clients are thread-safe, so
    `--parallel` workers share it; it lives as long as the process."""
    return httpx.Client()


def baseline(ctx: Context, ls: LoadedScenario) -> None:
    ctx.progress("baseline: waiting for the target to be ready")
    ctx.rec.event("phase baseline")
    base = ctx.lab.baseline_config(ctx.target)
    if ctx.lab.config(ctx.target) != base:
        raise LabError(
            f"node {ctx.target} is not at its baseline configuration",
            hint="a previous run left changes behind: run `gameday cleanup`",
        )
    if ls.scenario.uses_monitoring:
        # brought up with the lab, but its first targets come 5 s of wall time later
        try:
            ctx.lab.monitoring_ready(60)
        except LabError as exc:
            ctx.rec.check(
                "baseline",
                "baseline: Prometheus scraping",
                None,
                "Prometheus has scraped every target of its configuration",
                exc.message,
                exc.hint or "",
            )
            raise ScenarioAborted from exc
    boot = ctx.scale.to_lab(ctx.lab.inventory.lab.boot_timeout_s)
    st, _, ok = ctx.wait(lambda s, _: s.ready, boot)
    if not ok:
        ctx.rec.check(
            "baseline",
            "baseline: target ready",
            None,
            "the target serves before anything is injected",
            f"{st.status.value}, ready={st.ready} after {boot:.1f} lab s",
        )
        raise ScenarioAborted
    # A steady state is awaited, not sampled: the previous scenario's cleanup may still be
    # settling (an exporter restarting, Prometheus's next scrape).
    settle_until = time.monotonic() + max(2.0, 10 * scrape_interval_lab(ctx))
    results = probe_all(ctx, ls.scenario.baseline.probes)
    while not all(r.verdict is ProbeVerdict.PASSED for r in results):
        if time.monotonic() > settle_until:
            break
        ctx.wait(lambda s, evs: False, scrape_interval_lab(ctx))
        results = probe_all(ctx, ls.scenario.baseline.probes)
    for r in results:
        # a baseline that does not hold means gameday cannot judge the scenario: error, not fail
        ctx.rec.check(
            "baseline",
            f"baseline: {r.name}",
            True if r.verdict is ProbeVerdict.PASSED else None,
            r.expected,
            r.observed,
        )
    if any(r.verdict is not ProbeVerdict.PASSED for r in results):
        raise ScenarioAborted


def apply_actions(ctx: Context, actions: list[Action], why: str) -> None:
    for action in actions:
        if isinstance(action, Rollback):
            undo_all(ctx, reason=why)
        elif isinstance(action, Restart):
            nodes = [n.name for name in action.nodes for n in ctx.lab.inventory.resolve(name)]
            ctx.rec.event(
                f"{why}: restart {', '.join(nodes)} "
                f"({'together' if action.together else 'one by one'})"
            )
            if action.together:
                ctx.lab.restart(nodes)
            else:
                for n in nodes:
                    ctx.lab.restart([n])
        elif isinstance(action, Signal):
            ctx.rec.event(
                f"{why}: SIG{action.signal.value} to {action.node}'s "
                f"{action.process.replace('_', ' ')}"
            )
            ctx.lab.signal(action.node, action.process, action.signal.value)
        elif isinstance(action, Traffic):
            send_traffic(ctx, action, why)
        else:
            record_and_apply(ctx, plan_change(ctx, action), why)
            if isinstance(action, StartProcess):
                wait_started(ctx, action)
        if why == "inject" and not isinstance(action, Traffic):
            ctx.fault_at = utcnow()
            ctx.fault_began_at = ctx.fault_began_at or ctx.fault_at


def wait_started(ctx: Context, action: StartProcess) -> None:
    """A program counts as started once it holds what it exists to hold: for the stray GPU
    program, its memory on the node's GPU (nvidia-smi lists it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any("omniparser" in p["name"] for p in ctx.lab.gpu_processes(action.node)):
            ctx.rec.event(f"{action.node}: {action.name} holds GPU memory")
            return
        time.sleep(LOG_POLL_S)  # the GPU list has no events
    raise LabError(f"{action.name} on {action.node} did not take GPU memory within 30 s")


def record_and_apply(ctx: Context, change: Change, why: str) -> None:
    seq = ctx.journal.record(ctx.scenario_id, change)  # on disk before it is applied
    ctx.open_changes.append((seq, change))
    ctx.rec.event(f"{why}: {describe_change(change)}")
    if change.note and change.kind is ChangeKind.NODE_CONFIG:
        ctx.rec.notes.append(change.note)
    t0 = time.monotonic()
    ctx.lab.apply(change)
    if change.kind is ChangeKind.SCRAPE_TARGETS:
        note_prometheus_load(ctx, time.monotonic() - t0)


def note_prometheus_load(ctx: Context, seconds: float) -> None:
    """A new scrape configuration costs Prometheus's discovery up to 5 s of wall time, whatever
    the time scale: say so in the timeline, where it would otherwise look like the runner's."""
    ctx.rec.event(
        f"configuration reloaded, every target scraped {seconds:.2f} s later", source="prometheus"
    )


def send_traffic(ctx: Context, action: Traffic, why: str) -> None:
    """Requests as users send them; a failure is the point, so outcomes are only recorded."""
    node = action.node or ctx.target
    boot = ctx.scale.to_lab(ctx.lab.inventory.lab.boot_timeout_s)
    ctx.wait(lambda s, _: s.ready, boot, node=node)
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


def plan_change(
    ctx: Context,
    action: SetArgs
    | SetEnv
    | ServiceLinks
    | StartProcess
    | StopProcess
    | ChangeAddress
    | ScrapeTargets,
) -> Change:
    if isinstance(action, ServiceLinks):
        return ctx.lab.service_links(action.node, action.service, action.port, action.enabled)
    if isinstance(action, StartProcess):
        cmd = [*PROGRAMS[action.program], *(["--mib", str(action.mib)] if action.mib else [])]
        return ctx.lab.start_process(action.node, action.name, cmd)
    if isinstance(action, StopProcess):
        return ctx.lab.stop_process(action.node, action.name)
    if isinstance(action, ChangeAddress):
        node = ctx.lab.inventory.node(action.node)
        address = action.address or dhcp_address(node, action.network)
        return ctx.lab.set_address(action.node, action.network, address)
    if isinstance(action, ScrapeTargets):
        return ctx.lab.scrape_on(action.job, action.network)
    before = ctx.lab.config(action.node)
    if isinstance(action, SetArgs):
        after = NodeConfig(args=tuple(edit_args(list(before.args), action.args)), env=before.env)
    else:
        env = dict(before.env)
        for k, v in action.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        after = NodeConfig(args=before.args, env=env)
    return Change(kind=ChangeKind.NODE_CONFIG, node=action.node, before=before, after=after)


def edit_args(args: list[str], edits: dict[str, str | int | float | bool | None]) -> list[str]:
    """Set, add or remove `--flag value` pairs (also `--flag=value`) in an engine command line."""
    out = list(args)
    for flag, value in edits.items():
        i = 0
        found = False
        while i < len(out):
            tok = out[i]
            if tok == flag or tok.startswith(flag + "="):
                has_value = tok == flag and i + 1 < len(out) and not out[i + 1].startswith("-")
                width = 2 if has_value else 1
                if value is None:
                    del out[i : i + width]
                    continue
                repl = [flag] if value is True else [flag, _arg(value)]
                out[i : i + width] = repl
                found = True
                i += len(repl)
                continue
            i += 1
        if not found and value is not None and value is not False:
            out += [flag] if value is True else [flag, _arg(value)]
    return out


def _arg(v: str | int | float | bool) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def describe_change(c: Change) -> str:
    b, a = c.before, c.after
    if isinstance(b, NodeConfig) and isinstance(a, NodeConfig):
        parts = []
        if b.args != a.args:
            parts.append(f"args {' '.join(b.args)} -> {' '.join(a.args)}")
        added = {k: v for k, v in a.env.items() if b.env.get(k) != v}
        removed = [k for k in b.env if k not in a.env]
        if added:
            parts.append("env set " + ", ".join(f"{k}={v}" for k, v in sorted(added.items())))
        if removed:
            parts.append("env unset " + ", ".join(sorted(removed)))
        return f"{c.node}: " + ("; ".join(parts) or "no change")
    if isinstance(a, ProcessState):
        verb = "start" if a.running else "stop"
        return f"{c.node}: {verb} process {c.subject}" + (
            f" ({' '.join(a.command)})" if a.running else ""
        )
    if isinstance(b, Value) and isinstance(a, Value):
        what = "address" if c.kind is ChangeKind.ADDRESS else "scrape network for"
        return f"{c.node}: {c.subject} {what} {b.value} -> {a.value}"
    return f"{c.node}: {c.kind.value}"


def dhcp_address(node: Node, network: str) -> str:
    """The address a DHCP server hands the node next: its configured host number + 10."""
    configured = node.network_address(network)
    if configured is None:
        raise LabError(f"node {node.name} has no address on the {network} network")
    *net, host = configured.split(".")
    return ".".join([*net, str((int(host) + 10 - 1) % 254 + 1)])


def undo_all(ctx: Context, reason: str) -> list[Change]:
    """Put every node this run changed back to how it was before its first change; returns the
    undos applied."""

    def applied(undo: Change, seconds: float) -> None:
        ctx.rec.event(f"{reason}: restore {describe_change(undo)}")
        if undo.kind is ChangeKind.SCRAPE_TARGETS:
            note_prometheus_load(ctx, seconds)

    done = restore(ctx.lab, [c for _, c in ctx.open_changes], f"undo ({reason})", applied)
    for seq, _ in reversed(ctx.open_changes):
        ctx.journal.undone(seq)
    ctx.open_changes.clear()
    return done


def exit_of(e: LabEvent) -> ExitInfo:
    return ExitInfo.model_validate(
        {
            k: e.data[k]
            for k in ("incarnation", "code", "started_at", "first_output_at", "finished_at")
        }
    )


def first_exit(events: list[LabEvent]) -> ExitInfo | None:
    """The first exit the node made on its own (not one caused by gameday stopping it)."""
    for e in events:
        if e.type is EventType.EXITED and not e.data.get("stopped"):
            return exit_of(e)
    return None


def inject_and_expect(ctx: Context, ls: LoadedScenario) -> float | None:
    sc = ls.scenario
    exp = sc.expect
    ctx.progress("inject")
    ctx.rec.event("phase inject")
    ctx.injected_at = utcnow()
    ctx.inject_seq = ctx.seq
    apply_actions(ctx, sc.inject, "inject")
    ctx.progress("expect: waiting for the failure")
    ctx.rec.event("phase expect")
    if exp.failure is FailureMode.SILENT:
        return expect_silent(ctx, ls)
    return expect_exit(ctx, ls)


def expect_silent(ctx: Context, ls: LoadedScenario) -> float | None:
    """Nothing exits and nothing logs: the failure is what the probes see, and when."""
    exp = ls.scenario.expect
    assert ctx.injected_at is not None
    deadline = time.monotonic() + ctx.scale.window_deadline_lab(exp.time_to_fail)
    results = probe_all(ctx, exp.probes)
    while not all(r.verdict is ProbeVerdict.PASSED for r in results):
        if time.monotonic() > deadline:
            break
        # Prometheus has no push API: look again after one (scaled) scrape interval
        ctx.wait(lambda s, evs: False, scrape_interval_lab(ctx))
        results = probe_all(ctx, exp.probes)
    seen_at = utcnow()
    ok = all(r.verdict is ProbeVerdict.PASSED for r in results)
    for r in results:
        ctx.rec.check("expect", f"expect: {r.name}", _verdict(r), r.expected, r.observed)
    capture_evidence(ctx, ls, "at the failure")
    if not ok:
        return None
    ttf = elapsed_real(ctx.scale, ctx.fault_at or ctx.injected_at, seen_at)
    ctx.rec.event("failure observed (silent: seen by the probes)", ts=seen_at)
    ctx.rec.check(
        "expect",
        "expect: time to fail",
        ctx.scale.check(exp.time_to_fail, ttf),
        ctx.scale.describe(exp.time_to_fail),
        f"{ttf:.1f} s real from the injection to the probes showing it",
    )
    return round(ttf, 3)


def expect_exit(ctx: Context, ls: LoadedScenario) -> float | None:
    exp = ls.scenario.expect
    assert exp.signature is not None
    # Wait for the first exit of the new incarnation; time it against the window plus start-up.
    deadline = ctx.scale.window_deadline_lab(exp.time_to_fail) + START_COST_S
    st, events, _ = ctx.wait(
        lambda s, evs: first_exit(evs) is not None, deadline, replay_from=ctx.inject_seq
    )
    failure = first_exit(events)
    if failure is None:
        observed = f"no exit within {deadline:.2f} lab s; node {st.status.value}, ready={st.ready}"
        ctx.rec.check(
            "expect",
            "expect: failure happens",
            False,
            f"the target fails within {ctx.scale.describe(exp.time_to_fail)}",
            observed,
        )
        raise ScenarioAborted
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
    )
    capture_evidence(ctx, ls, "at the failure")

    if exp.state is not None:
        want = exp.state
        # restarts happen after back-off: allow for the back-off schedule, scaled
        backoff_real = sum(min(10 * 2**i, 300) for i in range(want.min_restarts + 1))
        budget = ctx.scale.to_lab(backoff_real + exp.time_to_fail.max_s * (want.min_restarts + 1))
        st, _, _ = ctx.wait(
            lambda s, _: s.status is want.status and s.restarts >= want.min_restarts, budget + 5.0
        )
        if want.max_restarts is not None:
            # give the restart policy its first back-off to (wrongly) restart the node
            st, _, _ = ctx.wait(
                lambda s, _: s.restarts > (want.max_restarts or 0),
                ctx.scale.to_lab(10) + ctx.scale.allowance_s,
            )
        ok = (
            st.status is want.status
            and st.restarts >= want.min_restarts
            and (want.max_restarts is None or st.restarts <= want.max_restarts)
        )
        ctx.rec.check(
            "expect",
            "expect: state",
            ok,
            f"{want.status.value} with restarts >= {want.min_restarts}"
            + (f" and <= {want.max_restarts}" if want.max_restarts is not None else ""),
            f"{st.status.value} ({st.reason or 'no reason'}), restarts {st.restarts}",
        )

    logs = logs_for(ctx, exp.signature.source, failure)
    result = sig.match(logs, exp.signature.in_order, exp.signature.absent)
    record_signature(
        ctx,
        "expect",
        result,
        logs,
        f"{exp.signature.source.value} logs (incarnation {failure.incarnation})",
    )
    if exp.exit_code is not None:
        ctx.rec.check(
            "expect",
            "expect: exit code",
            failure.code == exp.exit_code,
            f"exit code {exp.exit_code}",
            f"exit code {failure.code}",
        )
    if exp.phase is not None:
        got = startup.reached(logs)
        ctx.rec.check(
            "expect",
            "expect: phase where it broke",
            got is exp.phase,
            exp.phase.value,
            got.value,
            "the last vLLM start-up phase the failed incarnation's log reached",
        )
    for r in probe_all(ctx, exp.probes):
        ctx.rec.check("expect", f"expect: {r.name}", _verdict(r), r.expected, r.observed)
    for ns in exp.elsewhere:
        expect_elsewhere(ctx, ns, failure.finished_at)
    ctx.rec.check(
        "expect",
        "expect: time to fail",
        ctx.scale.check(exp.time_to_fail, ttf),
        ctx.scale.describe(exp.time_to_fail),
        f"{ttf:.1f} s real ({(failure.finished_at - start).total_seconds():.3f} s in the lab, "
        "from first output (or the injection) to exit)",
    )
    return round(ttf, 3)


def expect_elsewhere(ctx: Context, ns: NodeSignature, after: datetime) -> None:
    """Lines another node must log after the failure (e.g. a worker's heartbeat complaint)."""
    deadline = time.monotonic() + ctx.scale.to_lab(ns.within_s) + ctx.scale.allowance_s
    while True:
        logs = [ln for ln in ctx.lab.logs(ns.node, ns.source) if ln.ts >= after]
        result = sig.match(logs, ns.in_order)
        if result.ok or time.monotonic() > deadline:
            break
        time.sleep(LOG_POLL_S)  # logs are files: there is no event for a new line
    record_signature(
        ctx,
        f"expect on {ns.node}",
        result,
        logs,
        f"{ns.node} logs after the failure (within {ns.within_s:g} s real)",
    )
    if result.ok:
        first = next(r for r in result.in_order if r.line_index is not None)
        ts = logs[first.line_index or 0].ts
        ctx.rec.check(
            "expect",
            f"expect on {ns.node}: within {ns.within_s:g} s",
            True,
            f"within {ns.within_s:g} s real of the failure",
            f"{elapsed_real(ctx.scale, after, ts):.1f} s real after it",
        )


def _verdict(r: ProbeResult) -> bool | None:
    if r.verdict is ProbeVerdict.ERROR:
        return None
    return r.verdict is ProbeVerdict.PASSED


def scrape_interval_lab(ctx: Context) -> float:
    mon = ctx.lab.inventory.lab.monitoring
    real = mon.scrape_interval_s if mon else 15.0
    return max(ctx.scale.to_lab(real), 0.05)


def capture_evidence(ctx: Context, ls: LoadedScenario, when: str) -> None:
    """The GPU process list, the runtime's events about the target (Kubernetes Events) and
    Prometheus's target table, as they were at this moment."""
    now = utcnow()
    gpu_nodes = sorted({p.node for p in _all_probes(ls) if isinstance(p, GpuProcessesProbe)})
    for node in gpu_nodes:
        try:
            procs = ctx.lab.gpu_processes(node)
        except GamedayError:
            continue
        lines = [
            EvidenceLine(ts=now, text=f"pid {p['pid']:>8}  {p['name']:<40} {p['mib']:>7} MiB")
            for p in procs
        ] or [EvidenceLine(ts=now, text="no GPU processes")]
        ctx.rec.evidence.append(Evidence(title=f"GPU processes on {node} {when}", lines=lines))
    try:
        title, events = ctx.lab.runtime_events(ctx.target)
    except GamedayError:
        title, events = "", []
    if events:
        ctx.rec.evidence.append(
            Evidence(
                title=f"{title} {when}",
                lines=[EvidenceLine(ts=e.ts, text=e.text, highlight=e.warning) for e in events],
            )
        )
    url = ctx.lab.inventory.lab.prometheus
    jobs = sorted({p.job for p in _all_probes(ls) if isinstance(p, TargetsProbe)})
    if url and jobs:
        lines = []
        for job in jobs:
            try:
                got = prometheus.targets(ctx.http, url, job)
            except GamedayError as exc:
                lines.append(EvidenceLine(ts=now, text=f"{job}: {exc.message}"))
                continue
            for node, t in sorted(got.items()):
                lines.append(
                    EvidenceLine(
                        ts=now,
                        highlight=t["health"] != "up",
                        text=f"{job:<14} {node:<8} {t['health']:<5} {t['scrapeUrl']:<40} "
                        f"{t['lastError']}",
                    )
                )
        ctx.rec.evidence.append(Evidence(title=f"Prometheus targets {when}", lines=lines))


def _all_probes(ls: LoadedScenario) -> list[Probe]:
    sc = ls.scenario
    return [*sc.baseline.probes, *sc.expect.probes, *sc.verify.probes]


def logs_for(ctx: Context, source: LogSource, failure: ExitInfo) -> list[LogLine]:
    if source is LogSource.PREVIOUS:
        return ctx.lab.logs_of(ctx.target, failure.incarnation)
    return ctx.lab.logs(ctx.target, LogSource.CURRENT)


def record_signature(
    ctx: Context, phase: str, result: sig.SignatureResult, logs: list[LogLine], source: str
) -> None:
    for i, r in enumerate(result.in_order):
        label = r.pattern.description or r.pattern.regex[:60]
        if r.ok:
            caps = ", ".join(f"{k}={v}" for k, v in r.captures.items())
            observed = f"line {r.line_index}: {r.line[:300] if r.line else ''}" + (
                f"  [captures: {caps}]" if caps else ""
            )
        elif r.matched:
            observed = f"matched line {r.line_index} but checks failed: " + "; ".join(
                r.failed_checks
            )
        else:
            observed = (
                "not found"
                + (" after the previous pattern's line" if i else "")
                + f" in {len(logs)} lines of {source}"
            )
        ctx.rec.check(
            phase,
            f"{phase}: signature {i + 1}/{len(result.in_order)}: {label}",
            r.ok,
            f"/{r.pattern.regex}/" + (f" with {_checks(r.pattern)}" if r.pattern.captures else ""),
            observed,
        )
    for r in result.absent:
        label = r.pattern.description or r.pattern.regex[:60]
        ctx.rec.check(
            phase,
            f"{phase}: absent: {label}",
            not r.matched,
            f"no line matches /{r.pattern.regex}/",
            "none found" if not r.matched else f"line {r.line_index}: {(r.line or '')[:300]}",
        )
    for r in result.in_order:
        if r.ok and r.line_index is not None:
            ln = logs[r.line_index]
            ctx.rec.event(
                f"log: {ln.text[:160]}",
                ts=ln.ts,
                source=f"log:{ctx.target}",
                clock="lab runtime (log line, stamped in UTC as read)",
            )
    marks = {r.line_index for r in result.in_order if r.line_index is not None}
    marks |= {r.line_index for r in result.absent if r.line_index is not None}
    keep: set[int] = set()
    for m in marks:
        keep |= set(range(max(0, m - 3), min(len(logs), m + 4)))
    keep |= set(range(max(0, len(logs) - 8), len(logs)))
    lines = [
        EvidenceLine(ts=ln.ts, text=ln.text, highlight=i in marks)
        for i, ln in enumerate(logs)
        if i in keep
    ]
    ctx.rec.evidence.append(Evidence(title=f"{phase}: {source}", lines=lines))


def _checks(p: Pattern) -> str:
    parts = []
    for name, chk in p.captures.items():
        for op, v in chk.model_dump(by_alias=True, exclude_none=True).items():
            parts.append(f"{name} {op} {v}")
    return ", ".join(parts)


def detect(ctx: Context, ls: LoadedScenario) -> None:
    """Each expected alert must be firing in Prometheus within its window from the injection
    (the moment its first change was in place)."""
    alerts = ls.scenario.detect.alerts
    if not alerts:
        return
    ctx.progress("detect: waiting for alerts")
    ctx.rec.event("phase detect")
    prom = ctx.lab.inventory.lab.prometheus
    since = ctx.fault_began_at or ctx.injected_at or utcnow()
    for a in alerts:
        name = f"detect: alert {a.name} fires"
        expected = f"firing within {a.within_s:g} s real of the injection"
        if not prom:
            ctx.rec.check(
                "detect",
                name,
                None,
                expected,
                "this lab has no Prometheus (gameday_lab.monitoring)",
            )
            continue
        deadline = time.monotonic() + max(
            0.0,
            ctx.scale.to_lab(a.within_s)
            + ctx.scale.allowance_s
            - (utcnow() - since).total_seconds(),
        )
        state, error = "inactive", ""
        while True:
            try:
                mine = [
                    x
                    for x in prometheus.alerts(ctx.http, prom)
                    if x["labels"].get("alertname") == a.name
                    and all(x["labels"].get(k) == v for k, v in a.labels.items())
                ]
                state = mine[0]["state"] if mine else "inactive"
                error = ""
            except GamedayError as exc:
                error = exc.message
            if state == "firing" or time.monotonic() > deadline:
                break
            # no push API: look three times per evaluation interval, so that the runner goes
            # on within a third of an interval of the alert firing (its time is Prometheus's own)
            ctx.wait(lambda s, evs: False, scrape_interval_lab(ctx) / 3)
        if error:
            ctx.rec.check("detect", name, None, expected, f"probe error: {error}")
            continue
        if state != "firing":
            ctx.rec.check("detect", name, False, expected, f"{state} after {a.within_s:g} s real")
            continue
        fired = alert_fired_at(ctx, a.name, mine[0]) if mine else utcnow()
        ttd = elapsed_real(ctx.scale, since, fired)
        ctx.time_to_detect = round(ttd, 3) if ctx.time_to_detect is None else ctx.time_to_detect
        ctx.rec.event(
            f"alert {a.name} firing",
            ts=fired,
            source="prometheus",
            clock="Prometheus (activeAt + the rule's for)",
        )
        ctx.rec.check(
            "detect",
            name,
            ctx.scale.check(Window(max_s=a.within_s), ttd),
            expected,
            f"firing {ttd:.1f} s real after the injection",
        )


def alert_fired_at(ctx: Context, name: str, alert: dict[str, object]) -> datetime:
    """When Prometheus turned the alert to firing, by its own clock: activeAt (pending since)
    plus the rule's `for`, for the lab's own rules; otherwise now."""
    mon = ctx.lab.inventory.lab.monitoring
    rule = next((r for r in mon.rules if r.name == name), None) if mon else None
    active = alert.get("activeAt")
    if rule is None or not isinstance(active, str):
        return utcnow()
    started = datetime.fromisoformat(active.replace("Z", "+00:00"))
    return started + timedelta(seconds=ctx.scale.to_lab(rule.for_s))


def recover(ctx: Context, ls: LoadedScenario) -> float | None:
    sc = ls.scenario
    ctx.rec.event("phase recover")
    ttr: float | None = None
    for i, step in enumerate(sc.recover, 1):
        ctx.progress(f"recover {i}/{len(sc.recover)}: {step.name}")
        label = f"recover {i}: {step.name}"
        if step.forbidden:
            ctx.rec.notes.append(f"FORBIDDEN shortcut - {step.name}: {step.forbidden}")
        since = ctx.seq
        apply_actions(ctx, step.actions, f"recover {i}")
        applied_at = utcnow()  # what applying itself costs (a reload, a stop) does not scale
        if step.outcome is Outcome.RESTORES:
            ttr = verify(ctx, ls, label, applied_at)
        else:
            shortcut(ctx, ls, step, label, since)
    return ttr


def probe_all(ctx: Context, probes: Sequence[Probe]) -> list[ProbeResult]:
    env = ProbeEnv(
        http=ctx.http, lab=ctx.lab, scale=ctx.scale.scale, target=ctx.target, since=ctx.injected_at
    )
    return run_probes(env, probes)


def verify(ctx: Context, ls: LoadedScenario, label: str, applied_at: datetime) -> float | None:
    """Service back: the node ready, then every verification probe passing, within the window."""
    v = ls.scenario.verify
    ctx.rec.event(f"phase verify ({label})")
    deadline_lab = ctx.scale.window_deadline_lab(v.time_to_recover) + START_COST_S
    t_end = time.monotonic() + deadline_lab
    gen0 = ctx.lab.states()[ctx.target].generation
    st, _, ready = ctx.wait(lambda s, _: s.ready and s.generation >= gen0, deadline_lab)
    results: list[ProbeResult] = []
    passed_at: datetime | None = None
    while ready:
        results = probe_all(ctx, v.probes)
        if all(r.verdict is ProbeVerdict.PASSED for r in results):
            passed_at = utcnow()
            break
        if time.monotonic() > t_end:
            break
        # a lab event wakes this at once; what no event announces (an HTTP answer, Prometheus's
        # next scrape) is looked at again after one scaled scrape interval (at most 1 s)
        retry = min(1.0, scrape_interval_lab(ctx), max(t_end - time.monotonic(), 0.01))
        ctx.wait(lambda s, evs: bool(evs), retry)
    ctx.rec.check(
        "recover",
        f"{label}: restores service",
        passed_at is not None,
        "ready, then every verification probe passes",
        "restored"
        if passed_at
        else f"not restored: node {st.status.value}, ready={st.ready}"
        + ("; " + "; ".join(f"{r.name}: {r.observed}" for r in results) if results else ""),
    )
    for r in results:
        ctx.rec.check(
            "verify", f"verify: {r.name}", r.verdict is ProbeVerdict.PASSED, r.expected, r.observed
        )
    if passed_at is None:
        return None
    state = ctx.lab.states()[ctx.target]
    # from the step (or, if it restarted the node, from the new incarnation's first output:
    # the interpreter's own start does not scale)
    start = max(applied_at, state.first_output_at or applied_at)
    ttr = elapsed_real(ctx.scale, start, passed_at)
    ctx.rec.event("service verified (health and inference)", ts=passed_at)
    ctx.rec.check(
        "verify",
        "verify: time to recover",
        ctx.scale.check(v.time_to_recover, ttr),
        ctx.scale.describe(v.time_to_recover),
        f"{ttr:.1f} s real (first output of the new incarnation -> probes pass)",
    )
    return round(ttr, 3)


def shortcut(ctx: Context, ls: LoadedScenario, step: RecoveryStep, label: str, since: int) -> None:
    """A step expected NOT to restore service: let it play out, then show that it did not."""
    settle = step.settle_s or ls.scenario.verify.time_to_recover.max_s
    budget = ctx.scale.to_lab(settle) + ctx.scale.allowance_s
    gen0 = ctx.lab.states()[ctx.target].generation

    # A step with a failure signature is awaited until it fails; otherwise until it fails or
    # the node serves again (then the probes decide).
    def settled(s: NodeState, evs: list[LabEvent]) -> bool:
        if first_exit(evs) is not None:
            return True
        return step.expect is None and s.ready and s.generation >= gen0

    st, events, _ = ctx.wait(settled, budget, replay_from=since)
    failure = first_exit(events)
    results = probe_all(ctx, ls.scenario.verify.probes)
    restored = all(r.verdict is ProbeVerdict.PASSED for r in results)
    how = (
        f"node failed again (exit {failure.code})"
        if failure
        else f"node {st.status.value}, ready={st.ready}"
    )
    ctx.rec.check(
        "recover",
        f"{label}: does NOT restore service",
        not restored,
        "service still down after this step" + (f" ({step.why})" if step.why else ""),
        (
            "restored (the shortcut worked, so the scenario's claim is wrong)"
            if restored
            else f"not restored: {how}; "
        )
        + "; ".join(f"{r.name}: {r.observed}" for r in results),
    )
    if step.expect is not None:
        if failure is None:
            ctx.rec.check(
                "recover",
                f"{label}: signature",
                False,
                "the failure signature of this step",
                "the node did not fail",
            )
        else:
            logs = logs_for(ctx, step.expect.source, failure)
            record_signature(
                ctx,
                label,
                sig.match(logs, step.expect.in_order),
                logs,
                f"logs of incarnation {failure.incarnation}",
            )


def cleanup(ctx: Context) -> None:
    """Undo every change this scenario made and get the baseline serving again: if the target
    does not come back on its own (a head that exited 0 is not restarted by its policy), restart
    its whole group together, as the runbook says."""
    ctx.progress("cleanup")
    ctx.rec.event("phase cleanup")
    try:
        undone = undo_all(ctx, "cleanup")
        boot = ctx.scale.to_lab(ctx.lab.inventory.lab.boot_timeout_s)
        st = ctx.lab.states()[ctx.target]
        if not st.ready:
            group = restart_scope(ctx.lab.inventory, ctx.target)
            reapplied = {c.node for c in undone if c.kind is ChangeKind.NODE_CONFIG}
            ok = False
            # Part of a group re-applied (so restarted) alone never rejoins the rest (the
            # head-only-restart lesson): restart it together now. Otherwise give the target
            # 30 s to come back by itself first.
            if not (len(group) > 1 and reapplied & set(group) and not set(group) <= reapplied):
                settle = ctx.scale.to_lab(30) + ctx.scale.allowance_s
                st, _, ok = ctx.wait(lambda s, _: s.ready, settle)
            if not ok:
                ctx.rec.event(f"cleanup: restart {', '.join(group)} together")
                ctx.lab.restart(group)
                st, _, ok = ctx.wait(lambda s, _: s.ready, boot)
            ctx.rec.event(
                "baseline serving again"
                if ok
                else f"baseline NOT ready after cleanup ({st.status.value})"
            )
            if not ok:
                ctx.rec.check(
                    "cleanup",
                    "cleanup: baseline restored",
                    None,
                    "the target serves again at baseline",
                    f"{st.status.value}, ready={st.ready}",
                )
    except GamedayError as exc:
        ctx.rec.check(
            "cleanup",
            "cleanup: baseline restored",
            None,
            "the lab back at baseline",
            f"cleanup failed: {exc}",
            "run `gameday cleanup` to undo what is left",
        )


CLEANING: set[int] = set()  # threads in cleanup: an interrupt must not reach them


@contextlib.contextmanager
def shielded_from_sigint() -> Iterator[None]:
    """Cleanup must finish: a Ctrl-C or SIGTERM during it is ignored, not obeyed. (Signals reach
    the main thread only; a worker thread of `--parallel` is marked as cleaning, so that the
    main thread does not interrupt it: runner.parallel.)"""
    if threading.current_thread() is not threading.main_thread():
        CLEANING.add(threading.get_ident())
        try:
            yield
        finally:
            CLEANING.discard(threading.get_ident())
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
