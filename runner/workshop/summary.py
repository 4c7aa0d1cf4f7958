"""The summary `workshop down` writes: per seat, each drill it ran, whether and when it was
acknowledged and recovered, the hints used, the shortcuts people tried and (with the scenario's
load) how many users' requests failed while they worked; as `summary.md` and
`summary.html` in the workshop's reports folder.

A drill that finished wrote its result.json (the workshop's reports folder); one that did not
(killed after the grace period, or still starting) left only its last status.json, which is read
instead, so a seat that never finished still has its row. It is written after the drills are
stopped and before the seats go down (that removes the status files).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pydantic

from runner.drill.bus import read_status
from runner.drill.model import DrillPhase, DrillStatus
from runner.errors import InputError
from runner.report.templating import ENV
from runner.results.drill_record import Frozen, HintView, ObservedAction
from runner.results.rundirs import run_dirs
from runner.results.schema import RunResult, ScenarioResult, load_result
from runner.workshop.seats import Workshop

MARKDOWN = "summary.md"
HTML = "summary.html"
NO_DRILL = "no drill"
# a drill's last phase, as the summary says it: what ended it (a drill that reached `done`
# without recovering ended otherwise)
ENDED = {
    DrillPhase.RECOVERED: "recovered",
    DrillPhase.GAVE_UP: "gave up",
    DrillPhase.TIMED_OUT: "timed out",
    DrillPhase.ERROR: "error",
}


class SeatDrill(Frozen):
    """One drill of one seat. Times are seconds since the seat's fault, as its drill kept them."""

    seat: int
    lab: str
    scenario: str | None = None
    title: str | None = None
    outcome: str  # recovered, timed out, gave up, error, unfinished (<phase>), no drill
    finished: bool = False  # the drill ended and wrote its reports
    acked_at_s: float | None = None
    recovered_at_s: float | None = None
    hints: tuple[HintView, ...] = ()
    shortcuts: tuple[ObservedAction, ...] = ()  # people's actions that matched a shortcut
    report: str | None = None  # the drill's report.html, relative to the summary's folder
    # the scenario's load: its requests answered from the fault on, and how many failed (None:
    # the drill had no load); a finished drill's are those of its fault phase, while people
    # worked, an unfinished one's those its page last showed
    users_sent: int | None = None
    users_failed: int | None = None


class WorkshopSummary(Frozen):
    lab: str
    seats: int
    written_at: datetime
    drills: tuple[SeatDrill, ...]
    unreadable: tuple[str, ...] = ()  # result files that could not be read, with why

    @property
    def loaded(self) -> bool:
        """Whether a drill had a load (the users' column then shows)."""
        return any(d.users_sent is not None for d in self.drills)


def _people(actions: Sequence[ObservedAction]) -> tuple[ObservedAction, ...]:
    """The shortcuts among the actions the drill recognised as a person's (a restart policy's
    own restarts are never recognised as one)."""
    return tuple(a for a in actions if a.shortcut)


def from_result(k: int, folder: Path, run_dir: Path, s: ScenarioResult) -> SeatDrill:
    d = s.drill
    assert d is not None  # only drills' results are read
    fault = next((f for f in s.impact.phases if f.phase == "fault"), None) if s.impact else None
    return SeatDrill(
        seat=k,
        lab=s.lab,
        scenario=s.id,
        title=s.title,
        outcome=d.outcome.value.replace("_", " "),
        finished=True,
        acked_at_s=d.time_to_acknowledge_s,
        recovered_at_s=d.time_to_recover_s,
        hints=tuple(d.hints),
        shortcuts=_people(d.shortcuts),
        report=str((run_dir / "report.html").relative_to(folder)),
        users_sent=None if s.impact is None else (fault.sent if fault else 0),
        users_failed=None if s.impact is None else (fault.failed if fault else 0),
    )


def from_status(k: int, st: DrillStatus) -> SeatDrill:
    if st.phase is DrillPhase.DONE:
        outcome = "recovered" if st.recovered_at_s is not None else "ended"
    else:
        outcome = ENDED.get(st.phase, f"unfinished ({st.phase.value.replace('_', ' ')})")
    return SeatDrill(
        seat=k,
        lab=st.lab,
        scenario=st.scenario,
        title=st.title,
        outcome=outcome,
        finished=st.phase is DrillPhase.DONE,
        acked_at_s=st.acked_at_s,
        recovered_at_s=st.recovered_at_s,
        hints=st.hints,
        shortcuts=_people(st.actions),
        users_sent=st.users.fault_sent if st.users else None,
        users_failed=st.users.fault_failed if st.users else None,
    )


def _results(folder: Path) -> tuple[dict[str, list[tuple[Path, RunResult]]], list[str]]:
    """The drills' results in the workshop's reports folder, by lab (each seat's is its own)."""
    by_lab: dict[str, list[tuple[Path, RunResult]]] = {}
    unreadable: list[str] = []
    for run_dir in run_dirs(folder):
        try:
            r = load_result(run_dir / "result.json")
        except InputError as exc:
            unreadable.append(exc.message)
            continue
        by_lab.setdefault(r.lab.name, []).append((run_dir, r))
    return by_lab, unreadable


def summarise(ws: Workshop, folder: Path, now: datetime | None = None) -> WorkshopSummary:
    """Every seat's drills: those that finished from their results in `folder`, the last one
    from its status when it did not finish (or left no result), `no drill` for a seat that had
    none."""
    results, unreadable = _results(folder)
    drills: list[SeatDrill] = []
    for k in ws.seats:
        lab = ws.seat(k).lab.name
        rows = [
            from_result(k, folder, run_dir, s)
            for run_dir, r in results.get(lab, [])
            for s in r.scenarios
            if s.drill is not None
        ]
        try:
            st = read_status(ws.drill_dir(k))
        except (OSError, pydantic.ValidationError) as exc:
            unreadable.append(f"seat {k}'s drill status: {str(exc).splitlines()[0]}")
            st = None
        if st is not None and (st.phase is not DrillPhase.DONE or not rows):
            rows.append(from_status(k, st))
        drills += rows or [SeatDrill(seat=k, lab=lab, outcome=NO_DRILL)]
    return WorkshopSummary(
        lab=ws.manifest.lab,
        seats=ws.manifest.seats,
        written_at=now or datetime.now(UTC),
        drills=tuple(drills),
        unreadable=tuple(unreadable),
    )


def failed_of(failed: int | None, sent: int | None) -> str:
    """Users' requests failed of those answered ("120 of 200"); `-` without a load."""
    if sent is None or failed is None:
        return "-"
    return f"{failed} of {sent}"


def users_failed(d: SeatDrill) -> str:
    """The requests that failed from the fault on, of those answered."""
    return failed_of(d.users_failed, d.users_sent)


def clock(v: float | None) -> str:
    """Seconds as m:ss, as the scoreboard shows them; `-` for none."""
    if v is None:
        return "-"
    m, s = divmod(int(v), 60)
    return f"{m}:{s:02d}"


# CommonMark lets any ASCII punctuation be escaped with a backslash; these would otherwise make
# a scenario's or a seat's words into markup (emphasis, a link, HTML, a table cell's end)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&])")


def md(text: str) -> str:
    """`text` as literal Markdown on one line."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def markdown(summary: WorkshopSummary) -> str:
    lines = [
        f"# Workshop of lab {md(summary.lab)}: summary",
        "",
        f"{summary.seats} seat(s); written {summary.written_at:%Y-%m-%d %H:%M} UTC, when the "
        "workshop went down. Times are minutes:seconds since each seat's fault.",
        "",
    ]
    loaded = summary.loaded
    head = ["seat", "lab", "scenario", "outcome", "acknowledged", "recovered", "hints"]
    head += ["shortcuts tried", *(["users failed"] if loaded else [])]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in summary.drills:
        cells = (
            str(d.seat),
            md(d.lab),
            md(d.scenario or "-"),
            md(d.outcome),
            clock(d.acked_at_s),
            clock(d.recovered_at_s),
            str(len(d.hints)),
            str(len(d.shortcuts)),
            *([users_failed(d)] if loaded else []),
        )
        lines.append("| " + " | ".join(cells) + " |")
    for d in summary.drills:
        if d.scenario is None:
            continue
        lines += ["", f"## Seat {d.seat}: {md(d.scenario)}, {md(d.outcome)}", ""]
        if d.title:
            lines += [md(d.title), ""]
        lines.append(f"- acknowledged: {clock(d.acked_at_s) if d.acked_at_s is not None else 'no'}")
        lines.append(
            f"- recovered: {clock(d.recovered_at_s) if d.recovered_at_s is not None else 'no'}"
        )
        lines.append(f"- hints used: {len(d.hints)}")
        lines += [
            f"  - {clock(h.at_s)} hint {h.index}{' (asked)' if h.requested else ''}: {md(h.text)}"
            for h in d.hints
        ]
        if d.users_sent is not None:
            lines.append(f"- users' requests failed while people worked: {users_failed(d)}")
        lines.append(f"- shortcuts tried: {len(d.shortcuts)}")
        lines += [
            f"  - {clock(a.at_s)} {md(a.step or a.kind.value)}: {md(a.why)}" for a in d.shortcuts
        ]
        if d.report:
            lines.append(f"- report: {md(d.report)}")
        if not d.finished:
            lines.append("- the drill did not finish: this is its last status")
    if summary.unreadable:
        lines += ["", "Not read:", ""] + [f"- {md(u)}" for u in summary.unreadable]
    return "\n".join(lines) + "\n"


def html(summary: WorkshopSummary) -> str:
    return ENV.get_template("workshop.html.j2").render(
        s=summary, clock=clock, users_failed=users_failed
    )


def write_summary(summary: WorkshopSummary, folder: Path) -> list[Path]:
    """summary.md and summary.html in `folder` (made if need be); the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in ((MARKDOWN, markdown(summary)), (HTML, html(summary))):
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    return written
