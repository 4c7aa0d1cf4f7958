"""report.html: one self-contained page. Failures first, each with its failed assertions; a
summary table that fits the first screen; then each scenario, folded, with its Gantt picture
(runner.report.gantt), assertions, evidence and full timeline.

Every value that came from a lab or a log is escaped (Jinja2 autoescape; the SVG by
ElementTree). Text is wrapped, never cut: a long value shows its first words and unfolds
(<details>) to the whole of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import jinja2
from markupsafe import Markup, escape

from runner.report import drill, gantt, gantt_layout
from runner.results import Assertion, EventKind, RunResult, ScenarioResult, Verdict

FOLD_CHARS = 200  # a longer value is folded behind its first words
ARROW = " -> "  # how the runner writes a change (describe_change: "args A -> B")

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("runner", "report/templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def head(text: str, limit: int = FOLD_CHARS) -> str:
    """The words of `text` that fit in `limit` characters (at least its first word)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(sep, 0, limit + 1) for sep in (" ", "/", ",", ";", "="))
    if cut <= 0:
        first = text.split(" ", 1)[0]
        return first
    return text[:cut].rstrip()


def arrows(text: str) -> Markup:
    """`text` escaped, each `before -> after` shown as before → after."""
    parts = [escape(p) for p in text.split(ARROW)]
    if len(parts) == 1:
        return Markup(parts[0])
    sep = Markup(' <span class="arrow">→</span> ')
    body = sep.join(
        Markup('<span class="{}">{}</span>').format("before" if i < len(parts) - 1 else "after", p)
        for i, p in enumerate(parts)
    )
    return Markup('<span class="change">{}</span>').format(body)


def fold(text: str, limit: int = FOLD_CHARS) -> Markup:
    """`text` (escaped, arrows shown); a long one folded behind its first words."""
    if len(text) <= limit:
        return arrows(text)
    return Markup(
        '<details class="fold"><summary>{} <span class="more">… ({} chars)</span></summary>'
        '<div class="full">{}</div></details>'
    ).format(arrows(head(text, limit)), len(text), arrows(text))


@dataclass(frozen=True)
class Failure:
    scenario: ScenarioResult
    assertions: list[Assertion]


def failures(result: RunResult) -> list[Failure]:
    """The scenarios that failed or erred, each with the assertions that did."""
    bad = (Verdict.FAILED, Verdict.ERROR)
    return [
        Failure(s, [a for a in s.assertions if a.verdict in bad])
        for s in result.scenarios
        if s.verdict in bad
    ]


def seconds(value: float | None, scale: float) -> str:
    return "-" if value is None else gantt_layout.fmt_s(value, scale)


def offset(s: ScenarioResult, at: datetime, scale: float) -> str:
    """An event's time since the scenario began, real-world seconds."""
    return "+" + gantt_layout.fmt_s((at - s.started_at).total_seconds() * scale, scale)


def html(result: RunResult) -> str:
    scale = result.lab.time_scale
    pictures = {
        s.id: Markup(gantt.svg(gantt_layout.layout(s, scale), f"timeline of {s.id}"))
        for s in result.scenarios
        if s.timeline
    }
    return _ENV.get_template("report.html.j2").render(
        r=result,
        scale=scale,
        failures=failures(result),
        pictures=pictures,
        drill=drill,
        fold=fold,
        arrows=arrows,
        seconds=seconds,
        offset=offset,
        INJECT=EventKind.INJECT,
    )
