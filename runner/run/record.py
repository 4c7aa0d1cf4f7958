"""What a run records as it goes: assertions (through a keyword API, one verdict type), the
timeline, evidence and notes; and how evidence is rendered (a signature's matched lines with
their context, a lab event as a timeline entry)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from runner.labs.base import EventType, LabEvent, LogLine
from runner.results.schema import (
    Assertion,
    EventKind,
    Evidence,
    EvidenceLine,
    PartDeath,
    Phase,
    TimelineEvent,
    Verdict,
    truncate,
)
from runner.run.probing import ProbeResult
from runner.spec import signature as sig
from runner.spec.expectations import Pattern

CONTEXT_LINES = 3  # lines kept on each side of a matched line
TAIL_LINES = 8  # the log's last lines, always kept


LAB_KINDS = {
    EventType.APPLIED: EventKind.APPLIED,
    EventType.STARTED: EventKind.STARTED,
    EventType.FIRST_OUTPUT: EventKind.FIRST_OUTPUT,
    EventType.READY: EventKind.READY,
    EventType.UNREADY: EventKind.UNREADY,
    EventType.EXITED: EventKind.EXITED,
    EventType.BACKOFF: EventKind.BACKOFF,
    EventType.AUX_STARTED: EventKind.PROCESS,
    EventType.AUX_STOPPED: EventKind.PROCESS,
}


@dataclass
class Recorder:
    assertions: list[Assertion] = field(default_factory=list)
    timeline: list[TimelineEvent] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    # ---- assertions ----
    def verdict(
        self,
        *,
        phase: Phase,
        name: str,
        verdict: Verdict,
        expected: str,
        observed: str,
        detail: str = "",
        died: PartDeath | None = None,
    ) -> Verdict:
        self.assertions.append(
            Assertion(
                name=name,
                phase=phase,
                verdict=verdict,
                expected=expected,
                observed=observed,
                detail=detail,
                died=died,
            )
        )
        return verdict

    def check(
        self, *, phase: Phase, name: str, ok: bool, expected: str, observed: str, detail: str = ""
    ) -> bool:
        """An assertion that passed or failed."""
        v = Verdict.PASSED if ok else Verdict.FAILED
        self.verdict(
            phase=phase, name=name, verdict=v, expected=expected, observed=observed, detail=detail
        )
        return ok

    def error(
        self,
        *,
        phase: Phase,
        name: str,
        expected: str,
        observed: str,
        detail: str = "",
        died: PartDeath | None = None,
    ) -> None:
        """gameday could not tell: the lab misbehaved (`died`: one of its parts died), a probe
        could not be made."""
        self.verdict(
            phase=phase,
            name=name,
            verdict=Verdict.ERROR,
            expected=expected,
            observed=observed,
            detail=detail,
            died=died,
        )

    def probe(self, phase: Phase, r: ProbeResult, *, verdict: Verdict | None = None) -> None:
        """A probe's result as an assertion (`verdict`: in place of the probe's own)."""
        self.verdict(
            phase=phase,
            name=f"{phase.value}: {r.name}",
            verdict=verdict or r.verdict,
            expected=r.expected,
            observed=r.observed,
        )

    # ---- timeline ----
    def event(
        self,
        event: str,
        *,
        ts: datetime | None = None,
        source: str = "runner",
        clock: str = "runner (UTC)",
        kind: EventKind | None = None,
        node: str | None = None,
    ) -> None:
        """`kind`: what it is for the report's picture (None: derived from the text)."""
        self.timeline.append(
            TimelineEvent(
                ts=ts or datetime.now(UTC),
                source=source,
                clock=clock,
                event=event,
                kind=kind,
                node=node,
            )
        )

    def lab_event(self, e: LabEvent) -> None:
        source = f"lab:{e.node}"
        if e.type is EventType.EXITED and e.exit is not None:
            code, inc = e.exit.code, e.exit.incarnation
            text = f"exited with code {code} (incarnation {inc})"
            if e.stopped:
                took = f", {e.stop_took_s:.3f} s after SIGTERM" if e.stop_took_s is not None else ""
                text = f"stopped by the lab to re-apply (exit {code}, incarnation {inc}{took})"
            self.event(
                text,
                ts=e.exit.finished_at,
                source=source,
                clock="lab runtime (exit time)",
                kind=EventKind.EXITED,
                node=e.node,
            )
            return
        text = e.type.value
        if e.type is EventType.BACKOFF:
            text = f"back-off {e.delay_s or 0:.3f} s (restarts {e.restarts})"
        elif e.type is EventType.STARTED:
            text = f"started incarnation {e.incarnation} pid {e.pid}"
        self.event(
            text,
            ts=e.ts,
            source=source,
            clock="lab runtime (UTC)",
            kind=LAB_KINDS[e.type],
            node=e.node,
        )

    # ---- evidence ----
    def signature(
        self,
        phase: Phase,
        label: str,
        result: sig.SignatureResult,
        logs: list[LogLine],
        *,
        node: str,
        source: str,
    ) -> None:
        """One assertion per pattern, the matched lines on the timeline, and the log around
        them as evidence. `label` names the step ("expect", "recover 2: restart the head")."""
        for i, r in enumerate(result.in_order):
            self.check(
                phase=phase,
                name=f"{label}: signature {i + 1}/{len(result.in_order)}: {_label(r.pattern)}",
                ok=r.ok,
                expected=f"/{r.pattern.regex}/"
                + (f" with {_checks(r.pattern)}" if r.pattern.captures else ""),
                observed=_observed(r, i, len(logs), source),
            )
        for r in result.absent:
            self.check(
                phase=phase,
                name=f"{label}: absent: {_label(r.pattern)}",
                ok=not r.matched,
                expected=f"no line matches /{r.pattern.regex}/",
                observed="none found"
                if not r.matched
                else f"line {r.line_index}: {truncate(r.line or '')}",
            )
        for r in result.in_order:
            if r.ok and r.line_index is not None:
                ln = logs[r.line_index]
                self.event(
                    f"log: {truncate(ln.text)}",
                    ts=ln.ts,
                    source=f"log:{node}",
                    clock="lab runtime (log line, stamped in UTC as read)",
                    kind=EventKind.LOG,
                    node=node,
                )
        marks = {
            r.line_index for r in (*result.in_order, *result.absent) if r.line_index is not None
        }
        self.evidence.append(Evidence(title=f"{label}: {source}", lines=excerpt(logs, marks)))


def excerpt(logs: list[LogLine], marks: set[int]) -> list[EvidenceLine]:
    """The marked lines with their context, and the log's tail; marked lines highlighted."""
    keep: set[int] = set(range(max(0, len(logs) - TAIL_LINES), len(logs)))
    for m in marks:
        keep |= set(range(max(0, m - CONTEXT_LINES), min(len(logs), m + CONTEXT_LINES + 1)))
    return [
        EvidenceLine(ts=ln.ts, text=ln.text, highlight=i in marks)
        for i, ln in enumerate(logs)
        if i in keep
    ]


def _label(p: Pattern) -> str:
    return p.description or p.regex[:60]


def _observed(r: sig.PatternResult, i: int, n_lines: int, source: str) -> str:
    if r.ok:
        caps = ", ".join(f"{k}={v}" for k, v in r.captures.items())
        return f"line {r.line_index}: {truncate(r.line or '')}" + (
            f"  [captures: {caps}]" if caps else ""
        )
    if r.matched:
        return f"matched line {r.line_index} but checks failed: " + "; ".join(r.failed_checks)
    return (
        "not found"
        + (" after the previous pattern's line" if i else "")
        + f" in {n_lines} lines of {source}"
    )


def _checks(p: Pattern) -> str:
    parts = []
    for name, chk in p.captures.items():
        for op, v in chk.model_dump(by_alias=True, exclude_none=True).items():
            parts.append(f"{name} {op} {v}")
    return ", ".join(parts)
