"""report.html: one self-contained page. Failures first, each with its failed assertions; a
summary table that fits the first screen; then each scenario, folded, with its Gantt picture
(runner.report.gantt), assertions, evidence and full timeline.

Every value that came from a lab or a log is escaped (Jinja2 autoescape; the SVG by
ElementTree). Text is wrapped, never cut: a long value shows its first words and unfolds
(<details>) to the whole of it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from runner.report import drill_times as drill
from runner.report import gantt, gantt_layout
from runner.report.templating import ENV
from runner.results.durations import real_s
from runner.results.schema import Assertion, EventKind, RunResult, ScenarioResult, Verdict

FOLD_CHARS = 200  # a longer value is folded behind its first words
ARROW = " -> "  # how the runner writes a change (describe_change: "args A -> B")


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
    """`text` escaped; a `before -> after` shown as before → after, the words that changed
    marked (<del>, <ins>) and the leading label ("node1: args") left plain."""
    parts = text.split(ARROW)
    if len(parts) != 2:
        return Markup(' <span class="arrow">→</span> ').join(escape(p) for p in parts)
    label, old, new = _changed(parts[0].split(" "), parts[1].split(" "))
    return Markup(
        '<span class="change">{}<span class="before">{}</span> <span class="arrow">→</span> '
        '<span class="after">{}</span></span>'
    ).format(escape(" ".join(label) + " ") if label else "", old, new)


def _changed(before: list[str], after: list[str]) -> tuple[list[str], Markup, Markup]:
    """The label that leads `before` (the words before the first one `after` shares, or, when
    they share none, all but as many as `after` has), and both sides with changes marked."""
    sm = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    blocks = [m for m in sm.get_matching_blocks() if m.size]
    if blocks and blocks[0].b == 0:
        n_label = blocks[0].a
    elif not blocks:
        n_label = max(len(before) - len(after), 0)
    else:
        n_label = 0
    label, before = before[:n_label], before[n_label:]
    sm = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    old: list[Markup] = []
    new: list[Markup] = []
    for op, a0, a1, b0, b1 in sm.get_opcodes():
        a_words, b_words = " ".join(before[a0:a1]), " ".join(after[b0:b1])
        if op == "equal":
            old.append(escape(a_words))
            new.append(escape(b_words))
            continue
        if a_words:
            old.append(Markup("<del>{}</del>").format(a_words))
        if b_words:
            new.append(Markup("<ins>{}</ins>").format(b_words))
    return label, Markup(" ").join(old), Markup(" ").join(new)


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
    """The scenarios that failed, erred or were inconclusive, each with the assertions that
    were."""
    bad = (Verdict.FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE)
    return [
        Failure(s, [a for a in s.assertions if a.verdict in bad])
        for s in result.scenarios
        if s.verdict in bad
    ]


def seconds(value: float | None, scale: float) -> str:
    return real_s(value, scale)


def offset(s: ScenarioResult, at: datetime, scale: float) -> str:
    """An event's time since the scenario began, real-world seconds."""
    return "+" + real_s((at - s.started_at).total_seconds() * scale, scale)


def html(result: RunResult) -> str:
    scale = result.lab.time_scale
    pictures = {
        s.id: Markup(gantt.svg(gantt_layout.layout(s, scale), f"timeline of {s.id}"))
        for s in result.scenarios
        if s.timeline
    }
    return ENV.get_template("report.html.j2").render(
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
