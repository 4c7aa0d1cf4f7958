"""What the load's users felt: the requests divided into phases, each phase's figures, when
users saw the fault first and last, and the scenario's `load.impact` bounds judged on them.

Figures are pure functions of the requests and the run's marks (`Marks`); `Users` is the glue a
run calls at its moments: `begin` once the baseline holds, `hold` after verify, `finish` at the
end whatever happened (the load stopped, its figures kept for result.json), `judge` when the run
got through its phases.
"""

from __future__ import annotations

import enum
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from runner.results.schema import (
    EventKind,
    ImpactFigures,
    LoadBin,
    Phase,
    PhaseFigures,
    Verdict,
)
from runner.run.context import Context
from runner.run.load import Stretch
from runner.run.traffic import Sent, Traffic
from runner.spec.kinds import Window
from runner.spec.timing import TimeScale
from runner.spec.workload import Load, LoadPhase, PhaseBounds

USERS = "users"  # the timeline's source of the load's events: their own lane in the picture
ANSWER_POLL_S = 0.05  # wall seconds between looks at how many requests were answered
# requests a stretch after the restore holds at least for its error rate to count as the
# baseline's: one success is no recovery, and half of the verify phase's default hold_requests
# (20) still lets a run that recovered at the restore show it
BACK_EVIDENCE = 10
# the report's picture of the requests over time: enough stretches to show a fault's edges on
# a 1100-pixel axis, few enough to keep result.json small
MAX_BINS = 150
MIN_BIN_S = 0.1  # wall seconds

# the run's phase an impact assertion is reported under
ASSERTED_IN = {
    LoadPhase.BASELINE: Phase.BASELINE,
    LoadPhase.INJECT: Phase.INJECT,
    LoadPhase.FAULT: Phase.EXPECT,
    LoadPhase.RECOVER: Phase.RECOVER,
    LoadPhase.VERIFY: Phase.VERIFY,
}


@dataclass(frozen=True)
class Marks:
    """The run's moments that divide the load into phases, in epoch seconds (None: the run
    did not get there)."""

    injected: float | None = None  # the injection began
    fault: float | None = None  # the injection's first change applied (None: at its start)
    restore: float | None = None  # the restoring step applied
    restored: float | None = None  # service verified

    @property
    def in_place(self) -> float | None:
        """When the fault was in place."""
        return self.fault if self.fault is not None else self.injected

    def phase_of(self, t: float) -> LoadPhase:
        if self.injected is None or t < self.injected:
            return LoadPhase.BASELINE
        if self.in_place is not None and t < self.in_place:
            return LoadPhase.INJECT
        if self.restore is None or t < self.restore:
            return LoadPhase.FAULT
        if self.restored is None or t < self.restored:
            return LoadPhase.RECOVER
        return LoadPhase.VERIFY


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (q in 0-100) of `values`; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def phase_figures(phase: LoadPhase, sent: Sequence[Sent]) -> PhaseFigures:
    ok = [s for s in sent if not s.failed]
    ttfts = [t for s in ok if (t := s.ttft_s) is not None]
    lat = [s.latency_s for s in ok]
    return PhaseFigures(
        phase=phase.value,
        sent=len(sent),
        failed=len(sent) - len(ok),
        error_rate=round((len(sent) - len(ok)) / len(sent), 6) if sent else None,
        p50_ms=_ms(percentile(lat, 50)),
        p99_ms=_ms(percentile(lat, 99)),
        ttft_p50_ms=_ms(percentile(ttfts, 50)),
        ttft_p99_ms=_ms(percentile(ttfts, 99)),
        outcomes=dict(sorted(Counter(s.outcome.value for s in sent).items())),
    )


def by_phase(sent: Sequence[Sent], marks: Marks) -> dict[LoadPhase, list[Sent]]:
    """The requests by the phase they were sent in; one still in flight when the fault was in
    place counts in the fault, and one of the baseline's still in flight when the injection
    began, in the injection's: what its user met (a recovery does not mend a request already
    failing, so the later boundaries go by the send alone)."""
    out: dict[LoadPhase, list[Sent]] = {p: [] for p in LoadPhase}
    early = (LoadPhase.BASELINE, LoadPhase.INJECT)
    for s in sent:
        phase = marks.phase_of(s.intended)
        if phase in early and marks.in_place is not None and s.end >= marks.in_place:
            phase = LoadPhase.FAULT
        elif phase is LoadPhase.BASELINE and marks.injected is not None and s.end >= marks.injected:
            phase = LoadPhase.INJECT
        out[phase].append(s)
    return out


def first_failure(sent: Sequence[Sent], since: float) -> float | None:
    """When users saw the first failure since `since`: the earliest failed answer's end."""
    return min((s.end for s in sent if s.failed and s.end >= since), default=None)


class Back(enum.StrEnum):
    """Whether users' error rate was back to the baseline's after the restore."""

    BACK = "back"
    NOT_BACK = "not_back"  # failures went on above the baseline's rate to the load's end
    NO_EVIDENCE = "no_evidence"  # too few requests after the restore to tell


@dataclass(frozen=True)
class LastSeen:
    """When users saw the fault for the last time after the restore (epoch seconds; None
    unless `back` is BACK), and from how many requests sent after it that was told."""

    back: Back
    at: float | None
    after: int


def last_failure(sent: Sequence[Sent], restore: float, baseline_rate: float) -> LastSeen:
    """When users saw the fault for the last time after `restore`: the end of the last failed
    request sent before the point from which the error rate stays at the baseline's, `restore`
    itself when that point is the restore.

    "Stays" is judged on every stretch from the point that holds at least BACK_EVIDENCE
    requests: the failures in it are at most `baseline_rate` of them. A lucky success between
    failures is no such point, nor is a long run of successes that dilutes a burst of failures
    before it; and a point needs BACK_EVIDENCE requests after it, so that the last few
    successes of a load that ended while failures went on are not taken for a recovery. With
    fewer than BACK_EVIDENCE requests sent after the restore at all (the load ended, or was
    bounded, at once), nothing tells: NO_EVIDENCE, not NOT_BACK."""
    after = sorted((s for s in sent if s.intended >= restore), key=lambda s: s.intended)
    n = len(after)
    if n < BACK_EVIDENCE:
        return LastSeen(Back.NO_EVIDENCE, None, n)
    # with g[i] = failures in after[:i] - rate * i, a stretch after[k:i] holds iff
    # g[i] <= g[k]; so k holds iff g[k] is at least the largest g[i] for i >= k + BACK_EVIDENCE
    g = [0.0] * (n + 1)
    for i, s in enumerate(after):
        g[i + 1] = g[i] + s.failed - baseline_rate
    top = [-math.inf] * (n + 2)
    for i in range(n, -1, -1):
        top[i] = max(g[i], top[i + 1])
    back = next(
        (k for k in range(n - BACK_EVIDENCE + 1) if top[k + BACK_EVIDENCE] <= g[k] + 1e-9), None
    )
    if back is None:
        return LastSeen(Back.NOT_BACK, None, n)
    cut = after[back].intended
    ends = [s.end for s in sent if s.failed and s.intended < cut and s.end >= restore]
    return LastSeen(Back.BACK, max(ends, default=restore), n)


def load_bins(sent: Sequence[Sent]) -> list[LoadBin]:
    """The requests in stretches of wall time by intended send time: at most MAX_BINS over the
    load, none shorter than MIN_BIN_S, a stretch with no request left out."""
    if not sent:
        return []
    t0 = min(s.intended for s in sent)
    span = max(s.intended for s in sent) - t0
    width = max(span / MAX_BINS, MIN_BIN_S)
    groups: dict[int, list[Sent]] = {}
    for s in sent:
        groups.setdefault(min(int((s.intended - t0) / width), MAX_BINS - 1), []).append(s)
    out = []
    for i, group in sorted(groups.items()):
        lat = [s.latency_s for s in group if not s.failed]
        out.append(
            LoadBin(
                start=_at(t0 + i * width),
                wall_s=round(width, 6),
                outcomes=dict(sorted(Counter(s.outcome.value for s in group).items())),
                p50_ms=_ms(percentile(lat, 50)),
                p99_ms=_ms(percentile(lat, 99)),
            )
        )
    return out


def figures(
    sent: Sequence[Sent], marks: Marks, scale: TimeScale, spec: Load, node: str
) -> tuple[ImpactFigures, float | None, LastSeen | None]:
    """The load's figures, the epoch seconds users saw the fault first, and when last (None:
    service was not restored)."""
    phases = by_phase(sent, marks)
    per = [phase_figures(p, phases[p]) for p in LoadPhase]
    first = None
    last: LastSeen | None = None
    if marks.injected is not None:
        first = first_failure(sent, marks.injected)
    if marks.restore is not None:
        base = per[0].error_rate or 0.0
        last = last_failure(sent, marks.restore, base)
    return (
        ImpactFigures(
            mode="open" if spec.rate is not None else "closed",
            rate=spec.rate,
            concurrency=spec.concurrency,
            node=node,
            phases=per,
            users_saw_first_s=_real(scale, marks.in_place, first),
            users_saw_last_s=_real(scale, marks.restore, last.at if last else None),
            bins=load_bins(sent),
        ),
        first,
        last,
    )


def _real(scale: TimeScale, start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return round(scale.to_real(max(0.0, end - start)), 3)


def _epoch(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


# ---- judging -----------------------------------------------------------------------------------


def _how(f: PhaseFigures) -> str:
    bad = ", ".join(f"{n} {o}" for o, n in f.outcomes.items() if o != "ok")
    return f"{f.failed} of {f.sent} failed" + (f": {bad}" if bad else "")


def judge_phase(
    ctx: Context,
    phase: LoadPhase,
    b: PhaseBounds,
    f: PhaseFigures,
    base: PhaseFigures,
    stretch: Stretch | None = None,
) -> None:
    """Each bound of `b` on the phase's figures, one assertion each. A latency over its bound
    by no more than the time the machine's CPUs were contended during the phase (`stretch`) is
    inconclusive, as a window is (runner.run.load): a request waits as long as the CPUs do."""
    where, label = ASSERTED_IN[phase], f"impact: {phase.value}"
    if f.sent < max(b.min_requests, 1):
        ctx.rec.check(
            phase=where,
            name=f"{label}: requests",
            ok=False,
            expected=f"at least {max(b.min_requests, 1)} requests to judge the phase by",
            observed=f"{f.sent} sent",
        )
        return
    rate = f.error_rate or 0.0
    if b.max_errors is not None:
        ctx.rec.check(
            phase=where,
            name=f"{label}: errors",
            ok=f.failed <= b.max_errors,
            expected=f"at most {b.max_errors} failed requests",
            observed=_how(f),
        )
    if b.max_error_rate is not None:
        ctx.rec.check(
            phase=where,
            name=f"{label}: error rate",
            ok=rate <= b.max_error_rate,
            expected=f"error rate <= {b.max_error_rate:g}",
            observed=f"{rate:.3f} ({_how(f)})",
        )
    if b.min_error_rate is not None:
        ctx.rec.check(
            phase=where,
            name=f"{label}: error rate felt",
            ok=rate >= b.min_error_rate,
            expected=f"error rate >= {b.min_error_rate:g} (users feel the fault)",
            observed=f"{rate:.3f} ({_how(f)})",
        )
    for what, bound, mine, theirs in (
        ("p50", b.max_p50_ratio, f.p50_ms, base.p50_ms),
        ("p99", b.max_p99_ratio, f.p99_ms, base.p99_ms),
        ("ttft p99", b.max_ttft_p99_ratio, f.ttft_p99_ms, base.ttft_p99_ms),
    ):
        if bound is None:
            continue
        name, expected = f"{label}: {what} latency", f"at most {bound:g} x the baseline's {what}"
        if theirs is None or theirs <= 0:
            ctx.rec.error(
                phase=where,
                name=name,
                expected=expected,
                observed=f"the baseline has no {what} to compare with (no request succeeded)",
            )
            continue
        if mine is None:
            ctx.rec.check(
                phase=where,
                name=name,
                ok=False,
                expected=expected,
                observed=f"no request succeeded in {phase.value}, so none has a {what}",
            )
            continue
        over_ms = mine - bound * theirs
        verdict, evidence = Verdict.PASSED, ""
        if over_ms > 0:
            verdict = Verdict.FAILED
            if stretch is not None and 0 < over_ms <= stretch.stalled_s * 1000:
                verdict = Verdict.INCONCLUSIVE
                evidence = (
                    f"; {over_ms:.1f} ms over, and for {stretch.stalled_s:.3f} s of the "
                    f"{stretch.wall_s:.3f} s of {phase.value} the machine's CPUs were contended "
                    f"({stretch.source.value}): the machine was too loaded to judge"
                )
        ctx.rec.verdict(
            phase=where,
            name=name,
            verdict=verdict,
            expected=expected + f" ({theirs:.1f} ms): <= {bound * theirs:.1f} ms",
            observed=f"{mine:.1f} ms ({mine / theirs:.2f} x)" + evidence,
        )


def judge_window(
    ctx: Context,
    name: str,
    window: Window,
    start: float | None,
    end: float | None,
    real_s: float | None,
    missing: str,
) -> None:
    if start is None or end is None or real_s is None:
        ctx.rec.check(
            phase=Phase.RECOVER if "last" in name else Phase.EXPECT,
            name=f"impact: {name}",
            ok=False,
            expected=ctx.scale.describe(window),
            observed=missing,
        )
        return
    ctx.check_window(
        Phase.RECOVER if "last" in name else Phase.EXPECT,
        f"impact: {name}",
        window,
        real_s,
        f"{real_s:.1f} s real",
        (_at(start), _at(max(start, end))),
    )


class Users:
    """The scenario's load, from the baseline to the end of the run (a no-op without one)."""

    def __init__(self, ctx: Context, spec: Load | None, load_scale: float = 1.0) -> None:
        # the lab's share of the scenario's load (LabSpec.load_scale): what its engines carry
        self.ctx, self.asked, self.load_scale = ctx, spec, load_scale
        self.spec = spec.scaled(load_scale) if spec is not None else None
        self.node = (spec.node if spec else None) or ctx.target
        self.traffic: Traffic | None = None
        self._first: float | None = None
        self._last: LastSeen | None = None
        self._ended: datetime | None = None

    def begin(self) -> None:
        """Start the load; the injection waits for `baseline_requests` answers."""
        if self.spec is None:
            return
        ctx, spec = self.ctx, self.spec
        loop = self.loop_text()
        ctx.progress(f"load: {loop} to {self.node}")
        node, lab = self.node, ctx.lab
        self.traffic = Traffic(lambda: lab.url(node), spec, ctx.scale.to_lab(spec.max_s))
        self.traffic.start()
        ctx.rec.event(
            f"load started: {loop} to {self.node}", ts=self.traffic.started_at, source=USERS
        )
        self._answered(spec.baseline_requests)

    def loop_text(self) -> str:
        """What the load sends, and the scenario's own where the lab's share changed it."""
        assert self.spec is not None
        sent = self.spec.loop_text()
        if self.asked is None or self.asked.loop_text() == sent:
            return sent
        return f"{sent} (the lab's load_scale {self.load_scale:g} of {self.asked.loop_text()})"

    def hold(self) -> None:
        """After service is verified: `hold_requests` more answers."""
        if self.traffic is not None and self.spec is not None and self.ctx.restored_at:
            self._answered(self.spec.hold_requests)

    def _answered(self, n: int) -> None:
        """Let the load go on until `n` more requests are answered, or it stops, or as long as
        they take at worst (each answered or timed out within timeout_s)."""
        assert self.traffic is not None and self.spec is not None
        traffic, spec = self.traffic, self.spec
        goal = traffic.count() + n
        if spec.rate is not None:
            worst = n / spec.rate + spec.timeout_s
        else:
            worst = -(-n // (spec.concurrency or 1)) * spec.timeout_s
        until = time.monotonic() + worst + 1.0
        while traffic.count() < goal and traffic.running and time.monotonic() < until:
            self.ctx.pause(ANSWER_POLL_S)

    def finish(self) -> None:
        """Stop the load (whatever happened) and keep its figures for the result."""
        if self.traffic is None or self.spec is None:
            return
        ctx, traffic = self.ctx, self.traffic
        traffic.stop()
        self._ended = datetime.now(UTC)
        if traffic.running:
            ctx.rec.error(
                phase=Phase.RUN,
                name="load: stopped",
                expected="the load stops when the run ends",
                observed="its thread still runs after the stop (it is a daemon: it ends with "
                "the runner's process)",
            )
        sent = traffic.sent()
        marks = Marks(
            _epoch(ctx.injected_at),
            _epoch(ctx.fault_began_at),
            _epoch(ctx.restore_at),
            _epoch(ctx.restored_at),
        )
        fig, self._first, self._last = figures(sent, marks, ctx.scale, self.spec, self.node)
        ctx.impact = fig.model_copy(
            update={"unfinished": traffic.unfinished, "load_scale": self.load_scale}
        )
        ctx.rec.event(f"load stopped: {len(sent)} requests answered", source=USERS)
        if self._first is not None:
            ctx.rec.event(
                "users saw the first failed request",
                ts=_at(self._first),
                kind=EventKind.NOTE,
                source=USERS,
            )
        if self._last is not None and self._last.at is not None:
            ctx.rec.event(
                "users saw the last failed request (the error rate back to the baseline's after)",
                ts=_at(self._last.at),
                kind=EventKind.NOTE,
                source=USERS,
            )
        if traffic.error is not None:
            ctx.rec.error(
                phase=Phase.RUN,
                name="load: generator",
                expected="the load generator runs to its end",
                observed=f"{type(traffic.error).__name__}: {traffic.error}",
            )

    def _fault_at(self) -> datetime | None:
        """When the fault was in place: the injection's first change applied (a process started
        in a container and holding its GPU takes seconds of wall time users do not feel yet),
        or, for an injection of no change, its start."""
        return self.ctx.fault_began_at or self.ctx.injected_at

    def _spans(self) -> dict[LoadPhase, tuple[datetime, datetime]]:
        """Each phase's start and end, where the run reached both."""
        assert self.traffic is not None
        c = self.ctx
        edges = [
            self.traffic.started_at,
            c.injected_at,
            self._fault_at(),
            c.restore_at,
            c.restored_at,
            self._ended,
        ]
        return {
            p: (a, b)
            for p, a, b in zip(LoadPhase, edges, edges[1:], strict=False)
            if a is not None and b is not None
        }

    def judge(self) -> None:
        """The scenario's impact bounds on what was recorded (finish first)."""
        if self.spec is None or self.ctx.impact is None:
            return
        ctx, imp, fig = self.ctx, self.spec.impact, self.ctx.impact
        per = {LoadPhase(f.phase): f for f in fig.phases}
        spans = self._spans()
        for phase, bounds in imp.phases().items():
            span = spans.get(phase)
            stretch = ctx.load.stretch(*span) if span else None
            judge_phase(ctx, phase, bounds, per[phase], per[LoadPhase.BASELINE], stretch)
        if imp.users_saw_first is not None:
            judge_window(
                ctx,
                "users saw first",
                imp.users_saw_first,
                _epoch(self._fault_at()),
                self._first,
                fig.users_saw_first_s,
                "no request failed after the injection",
            )
        if imp.users_saw_last is not None:
            self._judge_last(imp.users_saw_last, fig)

    def _judge_last(self, window: Window, fig: ImpactFigures) -> None:
        """Too few requests after the restore tell nothing either way: inconclusive, with the
        count (a scenario that needs them bounds the verify phase's `min_requests`)."""
        ctx, last = self.ctx, self._last
        if last is not None and last.back is Back.NO_EVIDENCE:
            ctx.rec.verdict(
                phase=Phase.RECOVER,
                name="impact: users saw last",
                verdict=Verdict.INCONCLUSIVE,
                expected=ctx.scale.describe(window),
                observed=f"{last.after} requests sent after the restore: at least "
                f"{BACK_EVIDENCE} tell whether the error rate is back to the baseline's",
            )
            return
        judge_window(
            ctx,
            "users saw last",
            window,
            _epoch(ctx.restore_at),
            last.at if last else None,
            fig.users_saw_last_s,
            "service was not restored"
            if ctx.restore_at is None
            else f"the error rate was not back to the baseline's by the load's last request "
            f"(of {last.after if last else 0} sent after the restore, no stretch of "
            f"{BACK_EVIDENCE} or more from a point on stayed at the baseline's rate)",
        )
