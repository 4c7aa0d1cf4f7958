"""Everything gameday prints goes through here (rich on a terminal, plain lines otherwise).
Results and JSON go to stdout; progress, messages and errors to stderr. `-q` keeps only the
results and the errors; `-v` adds every progress line and each failed assertion's detail.

No control character from a log, a lab or a scenario reaches the terminal raw: every string
rich renders passes through runner.results.printable first (ESC becomes `\x1b`), and `escape` does
the same for text that takes another path (the live status line)."""

from __future__ import annotations

import enum
import json
import os
import re
import sys
import textwrap
import threading
import time
from typing import Any

from rich import markup
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from runner.errors import GamedayError
from runner.report import drill_times, impact_text
from runner.results.durations import real_s, wall_s
from runner.results.printable import printable
from runner.results.schema import Assertion, RunMode, RunResult, ScenarioResult, Verdict
from runner.results.trends import History, Measure, Point, people, shown

__all__ = [
    "Level",
    "debug",
    "drill_summary",
    "err",
    "error",
    "escape",
    "history_table",
    "json_out",
    "message",
    "out",
    "run_summary",
    "set_level",
    "warning",
]


class Level(enum.IntEnum):
    """How much goes to stderr besides errors (`gameday -q` / `-v`)."""

    QUIET = 0  # results and errors only
    NORMAL = 1
    VERBOSE = 2  # every progress line, an error's traceback


_level = Level.NORMAL


def set_level(level: Level) -> None:
    global _level
    _level = level


def level() -> Level:
    return _level


# A backslash before a `[` that rich's escape leaves alone (not tag-like: `\[W`, a regex's
# escaped bracket) is still taken by rich's parser as an escape and dropped: one more keeps it.
_BARE_ESCAPE = re.compile(r"(\\+)(\[(?![a-z#/@]))")


def escape(text: str) -> str:
    """`text` as literal rich markup, its control characters made visible."""
    return _BARE_ESCAPE.sub(
        lambda m: m.group(1) + "\\" + m.group(2), markup.escape(printable(text))
    )


class _Console(Console):
    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Every string rich prints (print's arguments, table cells) comes through here."""
        return super().render_str(printable(text), **kwargs)


def _to_devnull(stream: Any) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


class _OutConsole(_Console):
    def on_broken_pipe(self) -> None:
        """`gameday triage x.log | head -1`: the reader has what it wanted. Rich would exit 1,
        which triage documents as "no known failure" and run as "an assertion failed"; the
        command goes on quietly and exits with its own code (a run still cleans up and writes
        its reports)."""
        self.quiet = True
        _to_devnull(sys.stdout)


class _ErrConsole(_Console):
    def on_broken_pipe(self) -> None:
        """`gameday run ... 2>&1 | head`: whoever read the progress has gone. Rich would exit;
        a run must go on without its reader, clean up, take its lab down and write its
        reports, so stderr goes quiet instead (and to /dev/null, for what writes to it
        directly)."""
        self.quiet = True
        _to_devnull(sys.stderr)


out = _OutConsole(highlight=False, soft_wrap=True)
err = _ErrConsole(stderr=True, highlight=False, soft_wrap=True)

_STYLE = {
    Verdict.PASSED: "green",
    Verdict.FAILED: "bold red",
    Verdict.ERROR: "yellow",
    Verdict.SKIPPED: "dim",
    Verdict.INCONCLUSIVE: "bold yellow",
}


class ProgressLine:
    """Progress while a run waits: a live status line on a terminal, timestamped lines in CI."""

    def __init__(self) -> None:
        self._status: Any = None
        self._t0 = time.monotonic()
        self._lock = threading.Lock()

    def __enter__(self) -> ProgressLine:
        if err.is_terminal and _level is Level.NORMAL:
            self._status = err.status("starting")
            self._status.__enter__()
        return self

    def __call__(self, message: str) -> None:
        if _level is Level.QUIET:
            return
        with self._lock:  # `--parallel` workers report from their threads
            self._show(message)

    def _show(self, message: str) -> None:
        stamp = f"{time.monotonic() - self._t0:7.2f}s"
        if self._status is not None:
            self._status.update(f"{stamp} {escape(message)}")
            if message.endswith(("passed", "failed", "error", "skipped")):
                err.print(f"{stamp} {escape(message)}")
        else:
            err.print(f"{stamp} {escape(message)}")

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(*exc)


def error(exc: GamedayError) -> None:
    err.print(f"[bold red]error:[/] {escape(exc.message)}")
    if exc.hint:
        err.print(f"  [dim]hint:[/] {escape(exc.hint)}")


def warning(text: str, hint: str | None = None) -> None:
    """Something the user should know before the command goes on (not with -q)."""
    if _level >= Level.NORMAL:
        err.print(f"[bold yellow]warning:[/] {escape(text)}")
        if hint:
            err.print(f"  [dim]hint:[/] {escape(hint)}")


def message(text: str) -> None:
    """A diagnostic on stderr (not with -q)."""
    if _level >= Level.NORMAL:
        err.print(escape(text))


def debug(text: str) -> None:
    """A diagnostic on stderr with -v only."""
    if _level >= Level.VERBOSE:
        err.print(f"[dim]{escape(text)}[/]")


def json_out(data: Any) -> None:
    try:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        out.on_broken_pipe()


def run_summary(result: RunResult, report_dir: str) -> None:
    """The run's table (durations in real-world seconds, lab seconds in brackets on a scaled
    lab), its failed assertions, where the reports are and the verdict. No cell is ever cut:
    where the table would not fit, a block per scenario instead (_stacked)."""
    title = escape(f"gameday run {result.run_id} on lab {result.lab.name}")
    table = Table(title=title)
    table.add_column("scenario", overflow="fold")
    table.add_column("verdict", no_wrap=True, min_width=7)
    for col in (*TIMES, "failed"):
        table.add_column(col, overflow="fold")
    scale = result.lab.time_scale
    for s in result.scenarios:
        bad = _failed(s)
        table.add_row(
            escape(s.id),
            _verdict(s.verdict),
            *drill_times.scenario_times(s, scale),
            str(len(bad)) if bad else "",
        )
    if Measurement.get(out, out.options.update_width(10**5), table).maximum <= out.width:
        out.print(table)
    else:
        _stacked(result, title)
    for s in result.scenarios:
        if s.impact:
            out.print(escape(f"{s.id} " + impact_text.heading(s.impact)))
            for ln in impact_text.lines(s.impact)[1:]:
                out.print(escape(f"  {ln}"))
    for s in result.scenarios:
        for a in _failed(s):
            verdict = f"[{_STYLE[a.verdict]}]{a.verdict.value.upper()}[/]"
            out.print(f"{verdict} {escape(s.id)}: {escape(a.name)}")
            out.print(f"    expected: {escape(a.expected)}")
            out.print(f"    observed: {escape(a.observed)}")
            if a.died is not None and a.died.last_lines:
                out.print(f"    last lines of {escape(a.died.part)}:")
                out.print(escape("\n".join(f"      {ln}" for ln in a.died.last_lines)))
            if a.detail.strip():
                # a failure's detail says why (a step's output): shown; an error's is a
                # traceback, for -v
                shown = "    " + a.detail.rstrip().replace("\n", "\n    ")
                if a.verdict is Verdict.FAILED:
                    out.print(escape(shown))
                else:
                    debug(shown)
    out.print(f"reports: {escape(report_dir)}/ (result.json, junit.xml, report.md, report.html)")
    stopped = (
        f" (interrupted by {result.interrupted.value}: the reports hold what ran)"
        if result.interrupted
        else ""
    )
    out.print(f"verdict: {_verdict(result.verdict)}{stopped}")


TIMES = ("time to fail", "time to detect", "time to recover")


def _times(s: ScenarioResult) -> dict[str, float | None]:
    return dict(
        zip(TIMES, (s.time_to_fail_s, s.time_to_detect_s, s.time_to_recover_s), strict=True)
    )


def _failed(s: ScenarioResult) -> list[Assertion]:
    bad = (Verdict.FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE)
    return [a for a in s.assertions if a.verdict in bad]


def _verdict(v: Verdict) -> str:
    return f"[{_STYLE[v]}]{v.value}[/]"


def _stacked(result: RunResult, title: str) -> None:
    """The run's table for a terminal too narrow for it: a block per scenario, its id and verdict
    on one line and each time on its own, so that nothing is folded mid-word."""
    out.print(title)
    for s in result.scenarios:
        out.print(f"{escape(s.id)}  {_verdict(s.verdict)}")
        shown = drill_times.scenario_times(s, result.lab.time_scale)
        for (label, value), text in zip(_times(s).items(), shown, strict=True):
            if value is not None:
                out.print(f"  {label:<16}{text}")
        if bad := _failed(s):
            out.print(f"  {'failed':<16}{len(bad)}")


LABELS = dict(zip(Measure, TIMES, strict=True))


def _block_line(label: str, value: str, indent: int = 2, width: int = 20) -> None:
    """`label` and `value` on a line of their own (escaped here); a value too long for the
    terminal continues under itself, broken between words only."""
    head = " " * indent + f"{label:<{width - 1}} "
    room = max(out.width - len(head), 20)
    lines = textwrap.wrap(value, room, break_long_words=False, break_on_hyphens=False) or [""]
    out.print(escape(head + lines[0]))
    for more in lines[1:]:
        out.print(escape(" " * len(head) + more))


def _fits(table: Table) -> bool:
    return Measurement.get(out, out.options.update_width(10**5), table).maximum <= out.width


def _history_cell(p: Point, m: Measure) -> str:
    """A measure's figure (a person's in wall seconds, the system's real-world), its change
    against the run of the same mode before, and a regression flagged; rich markup."""
    text = escape(shown(p, m))
    change = p.change_s.get(m)
    if change is not None:
        text += f" ({change:+.1f} s{' wall' if people(p, m) else ''})"
    if m is Measure.RECOVER and p.recover_regressed:
        text += " [bold red]REGRESSED[/]"
    return text


def history_table(h: History) -> None:
    """One table per scenario: its runs oldest first with their mode (run, drill, seat), each
    time with its change against the run of the same mode before, a regression in time to
    recover flagged. Where a table would not fit the terminal, a block per run instead (its id,
    mode and verdict on one line, each time on its own), so that nothing is folded mid-word."""
    for t in h.trends:
        title = escape(f"{t.scenario}: {len(t.points)} run(s)")
        table = Table(title=title, title_justify="left")
        table.add_column("run", no_wrap=True)
        table.add_column("mode", no_wrap=True)
        table.add_column("verdict", no_wrap=True, min_width=7)
        for m in Measure:
            table.add_column(LABELS[m], no_wrap=True)
        loaded = any(p.fault_error_rate is not None for p in t.points)
        if loaded:
            table.add_column(FAULT_ERRORS, no_wrap=True)
        for p in t.points:
            table.add_row(
                escape(p.run_id),
                p.mode.value,
                _verdict(p.verdict),
                *(_history_cell(p, m) for m in Measure),
                *([_fault_cell(p)] if loaded else []),
            )
        if _fits(table):
            out.print(table)
            continue
        out.print(title)
        for p in t.points:
            out.print(f"{escape(p.run_id)}  {p.mode.value}  {_verdict(p.verdict)}")
            for m in Measure:
                if getattr(p, m.value) is not None or p.change_s.get(m) is not None:
                    out.print(f"  {LABELS[m]:<16}{_history_cell(p, m)}")
            if p.fault_error_rate is not None:
                out.print(f"  {FAULT_ERRORS:<16}{_fault_cell(p)}")


FAULT_ERRORS = "fault errors"  # the share of the load's requests that failed during the fault


def _rate(rate: float | None) -> str:
    return "" if rate is None else f"{rate:.1%}"


def _fault_cell(p: Point) -> str:
    """The fault's error rate, with the lab's share of the load where it was not the whole: a
    rate measured at another share is not the same load."""
    share = f" (load_scale {p.load_scale:g})" if p.load_scale != 1 else ""
    return _rate(p.fault_error_rate) + (share if p.fault_error_rate is not None else "")


def _asked(requested: bool) -> str:
    return "asked for" if requested else "released"


def drill_summary(result: RunResult, report_dir: str) -> None:
    """What `gameday drill` prints at its end: per scenario, the drill's outcome, the time to
    fail and to detect (the system's, real-world seconds), the people's times (wall seconds,
    which are real-world seconds), each against its window, the hints used and each shortcut
    tried; then the failed assertions, where the reports are and the verdict. One line per
    figure, so that an 80-column terminal folds none."""
    scale = result.lab.time_scale
    where = f" (time scale x{scale:g})" if scale != 1 else ""
    kind = "seat drill" if result.mode is RunMode.SEAT else "drill"
    out.print(escape(f"gameday {kind} {result.run_id} on lab {result.lab.name}{where}"))
    for s in result.scenarios:
        out.print(f"{escape(s.id)}  {_verdict(s.verdict)}")
        rows = [("time to fail", real_s(s.time_to_fail_s, scale) + " (the system's)")]
        if s.drill is not None:
            rows += [
                (k, v) for k, v in drill_times.summary(s.drill, s.impact) if k != "handed over"
            ]
            rows += [
                (f"  at {wall_s(cut.at_s)}", f"{cut.step}: {cut.why}") for cut in s.drill.shortcuts
            ]
            rows += [
                (f"  hint {h.index}", f"{_asked(h.requested)} at {wall_s(h.at_s)}: {h.text}")
                for h in s.drill.hints
            ]
        width = max(len(label) for label, _ in rows) + 2
        for label, value in rows:
            _block_line(label, value, width=width)
    for s in result.scenarios:
        if s.impact:
            out.print(escape(f"{s.id} " + impact_text.heading(s.impact)))
            for ln in impact_text.lines(s.impact)[1:]:
                out.print(escape(f"  {ln}"))
    for s in result.scenarios:
        for a in _failed(s):
            verdict = f"[{_STYLE[a.verdict]}]{a.verdict.value.upper()}[/]"
            out.print(f"{verdict} {escape(s.id)}: {escape(a.name)}")
            _block_line("expected:", a.expected, indent=4, width=10)
            _block_line("observed:", a.observed, indent=4, width=10)
    out.print(f"reports: {escape(report_dir)}/ (result.json, junit.xml, report.md, report.html)")
    out.print(f"verdict: {_verdict(result.verdict)}")
