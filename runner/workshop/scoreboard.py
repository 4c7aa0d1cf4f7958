"""The facilitator's scoreboard: one row per seat, from the seat's drill status (status.json,
written by the drill) and whether its lab is up. Rows are plain data; the terminal table, the
JSON and the page all draw the same rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pydantic
from rich.table import Table
from rich.text import Text

from runner.drill.bus import STATUS_FILE, read_status
from runner.labs import open_lab
from runner.workshop.drills import drilling, read_record
from runner.workshop.seats import Workshop
from runner.workshop.summary import clock, failed_of

IDLE = "idle"  # up, no drill (yet)
DOWN = "down"  # the seat's lab is not up
FAILED_START = "drill failed to start"  # its output: seat-<k>.drill.err


class SeatRow(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    seat: int
    lab: str
    attendee: str | None = None  # as `workshop up --attendees` named them
    state: str  # a DrillPhase value, IDLE or DOWN
    scenario: str | None = None
    elapsed_s: float | None = None  # wall seconds since the fault
    hints_used: int = 0
    shortcuts: tuple[str, ...] = ()  # the recovery steps the shortcuts matched
    acked_at_s: float | None = None
    recovered_at_s: float | None = None
    # the scenario's load: the requests answered since the fault, and how many failed (None:
    # no load)
    users_sent: int | None = None
    users_failed: int | None = None
    page_url: str | None = None  # the responders' view
    facilitator_url: str | None = None  # the view with the answers, for the facilitator's board
    drill_pid: int | None = None  # the drill `workshop start` started, while it runs


class Scoreboard(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    lab: str
    at: datetime
    seats: tuple[SeatRow, ...]


def seat_row(
    k: int,
    lab: str,
    drill_dir: Path,
    up: bool,
    drill_pid: int | None = None,
    failed_start: bool = False,
    attendee: str | None = None,
    seat_url: str | None = None,
) -> SeatRow:
    """Seat k's row: its drill's last status when it has one (a drill that ended keeps its
    row: recovered-at is the point), else idle or down; `failed_start`: a drill was started
    there and exited before it wrote any status (its output is in seat-<k>.drill.err);
    `seat_url`: the seat's page as its card gives it, shown before any drill runs."""
    status = read_status(drill_dir)
    if status is None:
        state = IDLE if up else DOWN
        if failed_start:
            state = FAILED_START
        return SeatRow(
            seat=k,
            lab=lab,
            attendee=attendee,
            state=state,
            drill_pid=drill_pid,
            page_url=seat_url,
        )
    shortcuts = tuple(a.step or a.kind.value for a in status.shortcuts)
    return SeatRow(
        seat=k,
        lab=lab,
        attendee=attendee,
        state=status.phase.value,
        scenario=status.scenario,
        elapsed_s=status.clock_s,
        hints_used=len(status.hints),
        shortcuts=shortcuts,
        acked_at_s=status.acked_at_s,
        recovered_at_s=status.recovered_at_s,
        users_sent=status.users.fault_sent if status.users else None,
        users_failed=status.users.fault_failed if status.users else None,
        page_url=status.page_url or _server_url(drill_dir) or seat_url,
        facilitator_url=_server_url(drill_dir, "facilitator_url"),
        drill_pid=drill_pid,
    )


def _server_url(drill_dir: Path, key: str = "url") -> str | None:
    """A page URL the drill wrote in its server.json (`url`: the responders' page,
    `facilitator_url`: the facilitator's), if it did."""
    try:
        url = json.loads((drill_dir / "server.json").read_text())[key]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return url if isinstance(url, str) else None


def _seat_url(ws: Workshop, k: int) -> str | None:
    """The seat's page as its card gives it; None for a seat without a token (a workshop
    brought up before seats had one)."""
    try:
        return ws.page_url(k)
    except OSError:
        return None


def scoreboard(ws: Workshop) -> Scoreboard:
    rows = []
    for k in ws.seats:
        inv = ws.seat(k)
        rec = drilling(ws, k)
        started = read_record(ws, k) is not None
        rows.append(
            seat_row(
                k,
                inv.lab.name,
                ws.drill_dir(k),
                open_lab(inv).is_up(),
                rec.pid if rec is not None else None,
                failed_start=started and rec is None,
                attendee=ws.attendee(k),
                seat_url=_seat_url(ws, k),
            )
        )
    return Scoreboard(lab=ws.manifest.lab, at=datetime.now(UTC), seats=tuple(rows))


def status_files(ws: Workshop) -> list[Path]:
    """The files whose change changes the scoreboard: each seat's status.json and drill record."""
    return [
        p
        for k in ws.seats
        for p in (ws.drill_dir(k) / STATUS_FILE, ws.folder / f"seat-{k}.drill.json")
    ]


def table(board: Scoreboard) -> Table:
    t = Table(title=f"workshop of lab {board.lab}", title_justify="left")
    named = any(r.attendee for r in board.seats)  # the column only when the host named them
    loaded = any(r.users_sent is not None for r in board.seats)  # and when a drill has a load
    for col in ("seat", *(("attendee",) if named else ()), "lab", "state", "scenario", "elapsed",
                "hints", "shortcuts", "acked", "recovered",
                *(("users failed",) if loaded else ())):  # fmt: skip
        t.add_column(col)
    for r in board.seats:
        cells = (
            str(r.seat),
            *((r.attendee or "-",) if named else ()),
            r.lab,
            r.state,
            r.scenario or "-",
            clock(r.elapsed_s),
            str(r.hints_used),
            ", ".join(r.shortcuts) or "-",
            clock(r.acked_at_s),
            clock(r.recovered_at_s),
            *((failed(r),) if loaded else ()),
        )
        t.add_row(*(Text(c) for c in cells))  # a scenario's words are text, not markup
    return t


def failed(r: SeatRow) -> str:
    """The requests that failed since the fault, of those answered."""
    return failed_of(r.users_failed, r.users_sent)
