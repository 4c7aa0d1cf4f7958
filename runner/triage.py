"""`gameday triage`: name the known failure(s) a captured log shows.

The knowledge is the scenario files themselves: a scenario is recognised when every pattern it
marks `identifies: true` matches, in order (absent patterns are not used: a `--tail` excerpt
proves nothing by what it lacks). Captured-value
checks are not applied here (a log from another model or another length is the same failure);
both vLLM wordings are covered by the scenarios' regexes. Runtime timestamps that `docker logs
-t` or `kubectl logs --timestamps` put in front of lines are stripped first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from runner import signature as sig
from runner import startup
from runner.labs.base import LogLine
from runner.scenario import LoadedScenario, Outcome, Pattern, StartupPhase

_RUNTIME_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})\s")


@dataclass(frozen=True)
class Finding:
    scenario: LoadedScenario
    phase: StartupPhase
    matched: list[tuple[int, str]]
    fixes: list[str]
    shortcuts: list[str]


def to_lines(text: str) -> list[LogLine]:
    now = datetime.now(UTC)
    return [LogLine(ts=now, text=_RUNTIME_TS.sub("", line)) for line in text.splitlines()]


def identifying(ls: LoadedScenario) -> list[Pattern]:
    signature = ls.scenario.expect.signature
    return [p for p in signature.in_order if p.identifies] if signature else []


def triage(text: str, scenarios: list[LoadedScenario]) -> list[Finding]:
    lines = to_lines(text)
    phase = startup.reached(lines)
    found = []
    for ls in scenarios:
        pats = [Pattern(regex=p.regex, description=p.description) for p in identifying(ls)]
        if not pats:
            continue
        res = sig.match(lines, pats)
        if not res.ok:
            continue
        found.append(
            Finding(
                scenario=ls,
                phase=phase,
                matched=[(r.line_index or 0, r.line or "") for r in res.in_order],
                fixes=[s.name for s in ls.scenario.recover if s.outcome is Outcome.RESTORES],
                shortcuts=[
                    f"{s.name}: {s.why or 'does not restore service'}"
                    + (f" [FORBIDDEN: {s.forbidden}]" if s.forbidden else "")
                    for s in ls.scenario.recover
                    if s.outcome is Outcome.DOES_NOT_RESTORE
                ],
            )
        )
    return found
