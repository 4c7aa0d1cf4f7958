"""Triage findings as `gameday triage` shows them: rich-markup lines for people, a dict for
`--json`. Line numbers are 1-based, as an editor shows them; evidence quotes the pasted lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.cli import output
from runner.triage import Finding, RecoverySource, Sighting

# A pasted line longer than this (a Python repr, a config dump) is folded on a terminal.
LINE_LIMIT = 1000

_CUT = {
    "message": "the paste is cut: the message stops part way, and its start names the failure",
    "raise": "the paste is cut: the traceback ends at the line that raises the message, and the "
    "message is not in it",
    "call": "the paste is cut: the traceback ends at the call into the check that raises the "
    "message, and the message is not in it",
    "cause": "the paste is cut before the root cause: the engine logs the exception that killed "
    "it with these lines (a traceback), and the paste shows none; paste the lines around them",
}

_PHASE_SOURCE = {
    "log": "the furthest the log's own lines show",
    "scenario": "where this failure happens, by its scenario; the log shows no later phase",
}


def _where(s: Sighting) -> str:
    pod = f"; {s.pod} from the line prefix" if s.pod else ""
    return f"{s.view} ({s.node} in the scenario{pod})"


def as_dict(name: str, findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "log": name,
        "findings": [
            {
                "scenario": f.scenario.scenario.metadata.id,
                "title": f.scenario.scenario.metadata.title,
                "phase": f.phase.value if f.phase else None,
                "phase_source": f.phase_source,
                "releases": list(f.releases),
                "cut": f.cut,
                "views": [
                    {
                        "view": s.view,
                        "node": s.node,
                        "pod": s.pod,
                        "releases": s.releases,
                        "releases_note": _flat(s.note) if s.note and s.releases else None,
                        "when": s.when,
                        "when_note": _flat(s.note) if s.note and s.when else None,
                        "cut": s.cut,
                        "cut_before": s.lacks,
                        "names_cause": s.names_cause,
                        "evidence": [
                            {
                                "line": e.number,
                                "text": e.quote,
                                "description": e.description,
                                "captures": dict(e.captures),
                            }
                            for e in s.evidence
                        ],
                    }
                    for s in f.sightings
                ],
                "matched": [e.quote for s in f.sightings for e in s.evidence],
                "advice": list(f.advice),
                "recovery": list(f.fixes),
                "recovery_source": f.recovery_source.value,
                "shortcuts_that_do_not_work": list(f.shortcuts),
            }
            for f in findings
        ],
    }


def as_lines(name: str, findings: Sequence[Finding]) -> list[str]:
    """Rich-markup lines; everything from the log or the scenario escaped."""
    esc = output.escape
    if not findings:
        return [f"{esc(name)}: no known failure"]
    out = []
    for f in findings:
        sc = f.scenario.scenario
        out.append(f"{esc(name)}: [bold]{esc(sc.metadata.id)}[/] - {esc(sc.metadata.title)}")
        if f.phase is None:
            out.append("  phase reached: unknown (the log shows no start-up marker)")
        else:
            out.append(f"  phase reached: {f.phase.value} ({_PHASE_SOURCE[f.phase_source]})")
        for s in f.sightings:
            out.append(f"  view: {esc(_where(s))}")
            if s.cut == "before":
                out.append(f"  the paste is cut before {s.lacks}: paste the lines before these")
            elif s.cut:
                out.append(f"  {_CUT[s.cut]}")
            if s.releases:
                out.append(f"  wording of vLLM {esc(s.releases)}: {esc(_flat(s.note))}")
            if s.when:
                out.append(f"  seen {esc(s.when)}: {esc(_flat(s.note))}")
            for e in s.evidence:
                head = f"  matched line {e.number}: "
                for i, ln in enumerate(e.lines):
                    lead = head if i == 0 else " " * len(head)
                    out.append(f"{lead}{esc(fold(ln.original))}")
                if e.captures:
                    values = " ".join(f"{k}={v}" for k, v in e.captures.items())
                    out.append(f"{' ' * len(head)}read: {esc(values)}")
        out += [f"  advice: {esc(a)}" for a in f.advice]
        if f.recovery_source is RecoverySource.LINES:
            out.append(
                "  recovery for what these lines show (in place of the scenario's own steps, "
                "which are for its lab's cause or engine):"
            )
            out += [f"    {esc(fix)}" for fix in f.fixes]
            if f.shortcuts:
                out.append("  shortcuts that do not restore service:")
        else:
            out += [f"  recovery: {esc(fix)}" for fix in f.fixes]
            if f.shortcuts:
                out.append("  shortcuts that did not restore service in the scenario's lab:")
        if f.shortcuts:
            out += [f"    {esc(s)}" for s in f.shortcuts]
    return out


def _flat(text: str | None) -> str:
    return " ".join((text or "").split())


def fold(line: str, limit: int = LINE_LIMIT) -> str:
    """`line` whole, or, past `limit` characters, up to the last word that fits and a note of
    what is left out (`--json` carries every line whole)."""
    if len(line) <= limit:
        return line
    cut = line.rfind(" ", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return f"{line[:cut]} \u2026 (+{len(line) - cut} characters; --json has the whole line)"
