"""Reports of a run, all in reports/<run-id>/:

- result.json  the RunResult as JSON (documented in docs/reports.md 'result.json')
- junit.xml    one testcase per scenario; a failed assertion is a <failure>, an error an <error>
- report.md    a summary a person reads in a terminal or a PR comment
- report.html  self-contained: failures first, a summary, a Gantt picture per scenario and the
               evidence (runner.report.html); every value from a lab or a log is escaped

Every string is redacted (runner.results.redact) and its control characters made visible
(runner.results.printable) before any file is written: XML 1.0 has no form for most C0 characters,
and `cat report.md` must not drive a terminal.
"""

from __future__ import annotations

import errno
import os
import secrets
import xml.etree.ElementTree as ET
from html import escape as html_escape
from pathlib import Path

from runner.errors import InputError
from runner.report import drill_times as drill
from runner.report import html as html_page
from runner.report import impact_text
from runner.results.printable import printable
from runner.results.redact import redact_obj
from runner.results.schema import Assertion, RunResult, ScenarioResult, Verdict

FILES = ("result.json", "junit.xml", "report.md", "report.html")


def write_reports(result: RunResult, out: Path) -> RunResult:
    """Write the four files, and return the result as they hold it. Every string is redacted
    and made printable first (so the terminal, printing the returned result, shows no secret the
    files leave out). Each file is written to a temporary name in `out` and renamed over its own
    name once all four are written, so a reader never sees half a file; InputError names a file
    that cannot be written."""
    result = RunResult.model_validate(redact_obj(result.model_dump(mode="json"), then=printable))
    texts = {
        "result.json": result.model_dump_json(indent=2) + "\n",
        "junit.xml": junit(result),
        "report.md": markdown(result),
        "report.html": html(result),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(out, exc) from None
    temps: dict[str, Path] = {}
    try:
        for name, text in texts.items():
            if (out / name).is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            temps[name] = _temp_file(out, name, text)
        for name, tmp in list(temps.items()):
            os.replace(tmp, out / name)
            del temps[name]
    except OSError as exc:
        raise _unwritable(out / name, exc) from None
    finally:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
    return result


def _temp_file(out: Path, name: str, text: str) -> Path:
    """`text` in a new file beside `name`, with the permissions a new file gets (the umask's)."""
    tmp = out / f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return tmp


def _unwritable(path: Path, exc: OSError) -> InputError:
    return InputError(
        f"cannot write the report: {exc.strerror or exc}",
        file=path,
        hint="make the run folder's files writable (a folder in a file's place is not)",
    )


def _duration(s: ScenarioResult) -> float:
    return (s.finished_at - s.started_at).total_seconds()


def _failure_text(s: ScenarioResult, verdict: Verdict) -> str:
    """Each such assertion: what was expected, what was observed and its detail (a failing
    step's output, a traceback), so that CI's page of the failure says why."""
    return "\n\n".join(
        f"{a.name}\n  expected: {a.expected}\n  observed: {a.observed}"
        + "".join(f"\n  {ln}" for ln in _death_lines(a))
        + ("\n  " + a.detail.rstrip().replace("\n", "\n  ") if a.detail.strip() else "")
        for a in s.assertions
        if a.verdict is verdict
    )


def _death_lines(a: Assertion) -> list[str]:
    """The dead part's last lines, under a line that names it (none: no part died)."""
    d = a.died
    if d is None or not d.last_lines:
        return []
    return [f"last lines of {d.part}:", *(f"  {ln}" for ln in d.last_lines)]


MESSAGE_CHARS = 500  # of a <failure>'s message: CI shows it as the test's one-line reason


def properties(result: RunResult, s: ScenarioResult) -> dict[str, str]:
    """A scenario's JUnit properties: its times in real-world seconds (one not measured is left
    out, not empty), the lab, the scenario's file, its runbooks and, in a drill, the drill's
    record."""
    times = {
        "gameday.time_to_fail_s": s.time_to_fail_s,
        "gameday.time_to_detect_s": s.time_to_detect_s,
        "gameday.time_to_recover_s": s.time_to_recover_s,
    }
    props = {name: f"{t:.3f}" for name, t in times.items() if t is not None}
    props |= {
        "gameday.lab": result.lab.name,
        "gameday.scenario_file": s.file,
    }
    props |= {f"runbook {step}": ref for step, ref in s.runbooks.items()}
    props |= impact_text.properties(s.impact) if s.impact else {}
    return props | (drill.properties(s.drill, result.mode) if s.drill else {})


# JUnit has no verdict between a failure and a pass: a scenario the machine's load kept from
# being judged is reported as an error (type "Inconclusive"), as gameday's exit code 3 does
JUNIT_ERRORS = (Verdict.ERROR, Verdict.INCONCLUSIVE)


def junit(result: RunResult) -> str:
    """One <testsuite> per scenario, holding its <properties> and its one <testcase> (the JUnit
    schemas CI tools publish allow properties on a testsuite only). `time` is wall-clock."""
    counts = {
        "tests": str(len(result.scenarios)),
        "failures": str(sum(s.verdict is Verdict.FAILED for s in result.scenarios)),
        "errors": str(sum(s.verdict in JUNIT_ERRORS for s in result.scenarios)),
    }
    total = (result.finished_at - result.started_at).total_seconds()
    suites = ET.Element("testsuites", {"name": "gameday", "time": f"{total:.3f}", **counts})
    for s in result.scenarios:
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"gameday.{result.lab.name}.{s.id}",
            tests="1",
            failures=str(int(s.verdict is Verdict.FAILED)),
            errors=str(int(s.verdict in JUNIT_ERRORS)),
            skipped=str(int(s.verdict is Verdict.SKIPPED)),
            time=f"{_duration(s):.3f}",
            timestamp=s.started_at.isoformat(),
            file=s.file,
        )
        props = ET.SubElement(suite, "properties")
        for name, value in properties(result, s).items():
            ET.SubElement(props, "property", name=name, value=value)
        _testcase(suite, result, s)
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


def _testcase(suite: ET.Element, result: RunResult, s: ScenarioResult) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        classname=f"gameday.{result.lab.name}",
        name=s.id,
        file=s.file,
        time=f"{_duration(s):.3f}",
    )
    if s.verdict is Verdict.FAILED:
        failed = [a for a in s.assertions if a.verdict is Verdict.FAILED]
        why = "; ".join(f"{a.name}: {a.observed}" for a in failed)
        el = ET.SubElement(
            case,
            "failure",
            message=f"{len(failed)} assertion(s) failed: {why}"[:MESSAGE_CHARS],
            type="AssertionFailed",
        )
        el.text = _failure_text(s, Verdict.FAILED)
    elif s.verdict is Verdict.ERROR:
        errs = [a for a in s.assertions if a.verdict is Verdict.ERROR]
        el = ET.SubElement(
            case,
            "error",
            message="; ".join(a.observed for a in errs)[:MESSAGE_CHARS],
            type="LabError",
        )
        el.text = _failure_text(s, Verdict.ERROR)
    elif s.verdict is Verdict.INCONCLUSIVE:
        # an <error>, not a <skipped>: CI shows an error as a test that did not pass (a skip is
        # easily read as fine), and not as an assertion that failed
        unjudged = [a for a in s.assertions if a.verdict is Verdict.INCONCLUSIVE]
        why = "; ".join(f"{a.name}: {a.observed}" for a in unjudged)
        el = ET.SubElement(
            case,
            "error",
            message=f"inconclusive, the machine was too loaded to judge: {why}"[:MESSAGE_CHARS],
            type="Inconclusive",
        )
        el.text = _failure_text(s, Verdict.INCONCLUSIVE)
    elif s.verdict is Verdict.SKIPPED:
        ET.SubElement(case, "skipped", message="; ".join(s.notes))
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join(
        [f"[{a.verdict.value}] {a.name}: {a.observed}" for a in s.assertions]
        + [f"runbook of {step}: {ref}" for step, ref in s.runbooks.items()]
    )


def _md(text: str) -> str:
    """A value as Markdown text: a viewer renders raw HTML (`<img onerror=...>`, `<script>`)
    that Markdown lets through, so `&`, `<` and `>` go as entities, which every viewer shows as
    the characters; `|` would end a table cell, a newline the line."""
    return html_escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """A value in a code span, which viewers show literally; one holding a backtick (which
    would end the span early) as escaped text instead."""
    return f"`{text}`" if "`" not in text and "\n" not in text else _md(text)


_CLOCK_NOTE = (
    "Times are real-world seconds; the lab's own seconds, in brackets, are shorter by its time "
    "scale."
)
_PEOPLE_NOTE = (
    " A person's times (labelled wall) are wall seconds, which are real-world seconds: the time "
    "scale speeds up the lab, not the people."
)


def markdown(result: RunResult) -> str:
    lines = [
        f"# gameday {result.mode.value} {result.run_id}: {result.verdict.value.upper()}"
        + (f" (interrupted by {result.interrupted.value})" if result.interrupted else ""),
        "",
        f"Lab **{_md(result.lab.name)}** ({_md(result.lab.kind)}, "
        f"time scale x{result.lab.time_scale:g}, "
        f"allowance {result.lab.timing_allowance_s:g} s), inventory {_code(result.lab.inventory)}.",
        f"Started {result.started_at.isoformat()}, "
        f"finished {result.finished_at.isoformat()} (UTC).",
        "",
        (_CLOCK_NOTE if result.lab.time_scale != 1 else "Times are real-world seconds.")
        + (_PEOPLE_NOTE if any(s.drill for s in result.scenarios) else ""),
        "",
        "| scenario | verdict | time to fail | time to detect | time to recover |",
        "|---|---|---|---|---|",
    ]
    for s in result.scenarios:
        cells = " | ".join(drill.scenario_times(s, result.lab.time_scale))
        lines.append(f"| {_md(s.id)} | {s.verdict.value} | {cells} |")
    for s in result.scenarios:
        lines += [
            "",
            f"## {_md(s.id)}: {_md(s.title)} ({s.verdict.value})",
            "",
            f"File {_code(s.file)}.",
            "",
        ]
        for n in s.notes:
            lines.append(f"> {_md(n)}")
        if s.notes:
            lines.append("")
        for step, ref in s.runbooks.items():
            lines.append(f"- runbook of {_md(step)}: {_md(ref)}")
        if s.runbooks:
            lines.append("")
        if s.drill:
            lines += _drill_md(s)
        if s.impact:
            lines += [f"- {_md(ln)}" for ln in impact_text.lines(s.impact)] + [""]
        if s.assertions:
            lines += ["| | assertion | expected | observed |", "|---|---|---|---|"]
            mark = {
                Verdict.PASSED: "ok",
                Verdict.FAILED: "FAIL",
                Verdict.ERROR: "ERROR",
                Verdict.SKIPPED: "skip",
                Verdict.INCONCLUSIVE: "INCONCLUSIVE",
            }
            for a in s.assertions:
                lines.append(
                    f"| {mark[a.verdict]} | {_md(a.name)} | {_md(a.expected)} | {_md(a.observed)} |"
                )
            for a in s.assertions:
                if a.died is not None and a.died.last_lines:
                    # an indented code block: no line it holds can end it
                    lines += ["", f"Last lines of {_md(a.died.part)} ({_md(a.name)}):", ""]
                    lines += [f"    {ln}" for ln in a.died.last_lines]
    return "\n".join(lines) + "\n"


def _drill_md(s: ScenarioResult) -> list[str]:
    assert s.drill is not None
    lines = [
        "### Drill (people's times in wall seconds since the fault, the system's real-world)",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {_md(v)} |" for k, v in drill.summary(s.drill, s.impact)]
    if s.drill.actions:
        lines += ["", "| at | action | nodes | step |", "|---|---|---|---|"]
        lines += [f"| {' | '.join(_md(c) for c in row)} |" for row in drill.action_rows(s.drill)]
    for h in s.drill.hints:
        asked = "asked for" if h.requested else "released"
        lines.append(f"- hint {h.index} {asked} at {h.at_s:.1f} s: {_md(h.text)}")
    return [*lines, ""]


def html(result: RunResult) -> str:
    return html_page.html(result)
