"""`gameday workshop`: one lab per attendee (a seat), a drill on each, and a scoreboard. A thin
layer over runner.workshop, like the rest of runner.cli."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from runner.cli import output
from runner.cli.options import config, handled, lab_option, load_all, reports_option
from runner.errors import GamedayError, InputError, LabError
from runner.fsutil import write_private
from runner.spec.inventory_load import check_scenario, load_inventory

if TYPE_CHECKING:
    from runner.workshop.scoreboard import Scoreboard
    from runner.workshop.seats import Workshop

JOBS_HELP = "Seats brought up (or down) at once [default: all of them]."


@click.group()
def workshop() -> None:
    """One isolated lab per attendee (seat k is instance k of the lab, as `run --parallel`
    makes them; on Kubernetes a namespace per seat), a drill on each, and a scoreboard.
    Everything of a workshop lives under $GAMEDAY_STATE_DIR/workshop/<lab name>/."""


@workshop.command("up")
@click.option("--seats", "n", type=int, default=None, help="How many seats (1..32) [default: one "
              "per name in --attendees].")  # fmt: skip
@lab_option
@click.option("--jobs", type=click.IntRange(1, 32), default=None, help=JOBS_HELP)
@click.option(
    "--page-base",
    type=click.IntRange(1024, 65000),
    default=8700,
    show_default=True,
    help="Seat k's drill page listens on this port + k; the host page on this port.",
)
@click.option(
    "--listen",
    default=None,
    help="The address the seats' drill pages listen on, for attendees on their own machines: "
    "an IPv4 address of this machine, never a wildcard [default: 127.0.0.1]. Each page opens "
    "with its seat's token only.",
)
@click.option(
    "--public-name",
    default=None,
    help="The name attendees reach this machine by, on the cards [default: the --listen address].",
)
@click.option(
    "--attendees",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file of attendees' names, one a line: seat k is the k-th, on its card and the "
    "host page.",
)
@reports_option
@handled
def workshop_up(
    n: int | None,
    lab_path: Path,
    jobs: int | None,
    page_base: int,
    listen: str | None,
    public_name: str | None,
    attendees: Path | None,
    reports_dir: Path,
) -> None:
    """Bring up N seats at once and write a seat card per seat (seat-<k>.md, also printed, and
    cards.html with every card, to print): the seat's lab, its commands, its drill page's
    address and its token. The seats' drills write their reports to
    REPORTS/workshops/<lab>-<time>/, out of the team's `gameday history`. Exit 2 for N out of
    1..32, a workshop of this lab already up, or a --listen address this machine does not
    have; exit 3 when a seat cannot come up (then every seat is taken down again)."""
    from runner.drill.server import HOST, check_listen, check_name
    from runner.workshop.cards import Seat, cards_page, seat_card
    from runner.workshop.seats import Listen, bring_up, create_workshop, read_attendees

    names = read_attendees(attendees) if attendees is not None else ()
    if n is None:
        if not names:
            raise InputError("how many seats? --seats N, or --attendees FILE", field="--seats")
        n = len(names)
    where = Listen(
        check_listen(listen) if listen is not None else HOST,
        check_name(public_name) if public_name is not None else None,
    )
    inventory = load_inventory(lab_path)
    ws = create_workshop(inventory, n, page_base, reports_dir, listen=where, attendees=names)
    seconds, urls = bring_up(ws, jobs or n)
    seats = [
        Seat(
            k=k,
            inventory=ws.seat(k),
            inventory_file=str(ws.seat_path(k)),
            urls=urls[k],
            page_url=ws.page_url(k),
            token=ws.token(k),
            attendee=ws.attendee(k),
        )
        for k in ws.seats
    ]
    for seat in seats:
        card = seat_card(seat)
        write_private(ws.folder / f"seat-{seat.k}.md", card)  # it holds the seat's token
        output.out.print(card, markup=False, highlight=False)
    write_private(ws.folder / "cards.html", cards_page(seats, ws.manifest.lab))
    output.message(
        f"workshop of lab {inventory.lab.name!r}: {n} seat(s) up in {seconds:.1f} s; cards in "
        f"{ws.folder} (cards.html to print)"
    )
    output.message(
        f"the host page: gameday workshop status --serve --lab {lab_path} "
        f"(http://127.0.0.1:{page_base}/host/{ws.manifest.host_token}/)"
    )


@workshop.command("start")
@click.argument("scenario")
@lab_option
@click.option("--seats", "chosen", default="all", show_default=True, help="all, or e.g. 1,3")
@handled
def workshop_start(scenario: str, lab_path: Path, chosen: str) -> None:
    """Start a drill of SCENARIO (a file or an id) on the chosen seats, each a detached `gameday
    drill` whose output goes to the workshop folder. Exit 2 when a chosen seat is already
    drilling (then no drill starts) or the scenario does not apply to the lab."""
    from runner.workshop.drills import start_drills
    from runner.workshop.seats import load_workshop, parse_seats

    inventory = load_inventory(lab_path)
    ws = load_workshop(inventory)
    seats = parse_seats(chosen, ws.manifest.seats)
    entries = load_all((scenario,))
    if len(entries) != 1:
        raise InputError(
            f"a workshop drills one scenario; {scenario!r} names {len(entries)}",
            field="SCENARIO",
            hint="name one scenario file or id",
        )
    check_scenario(entries[0].loaded, inventory)
    arg = str(Path(scenario).resolve()) if os.path.exists(scenario) else scenario
    for k, rec in start_drills(ws, seats, arg).items():
        output.message(f"seat {k}: drill {scenario} started (pid {rec.pid}); {ws.page_url(k)}")


@workshop.command("status")
@lab_option
@click.option("--json", "as_json", is_flag=True, help="The scoreboard as JSON.")
@click.option("--serve", is_flag=True, help="Serve the host page, live (Ctrl-C ends).")
@click.option("--port", type=click.IntRange(0, 65535), default=None,
              help="The page's port [default: the workshop's --page-base].")  # fmt: skip
@handled
def workshop_status(lab_path: Path, as_json: bool, serve: bool, port: int | None) -> None:
    """The scoreboard: per seat, its attendee, the drill's state (or idle / down), the time since
    the fault, hints used, shortcuts tried, acknowledged and recovered at. `--serve`: the same
    as the host page on 127.0.0.1, behind the workshop's host token, with every seat's page
    address. Exit 3 without a workshop."""
    from runner.workshop.scoreboard import scoreboard, status_files, table
    from runner.workshop.seats import load_workshop

    ws = load_workshop(load_inventory(lab_path))
    if serve:
        from runner.workshop.board_server import Feed, start_server

        if not ws.manifest.host_token:
            raise LabError(
                "this workshop has no host token (brought up by an older gameday)",
                hint=f"gameday workshop down --lab {lab_path}, then up again",
            )
        handle = start_server(
            Feed(lambda: scoreboard(ws), lambda: status_files(ws)),
            ws.manifest.page_base if port is None else port,
            ws.manifest.host_token,
        )
        output.message(f"host page of lab {ws.manifest.lab!r} on {handle.url} (Ctrl-C ends)")
        try:
            handle.wait()
        except KeyboardInterrupt:  # how a facilitator ends the page: nothing to clean up
            output.message("scoreboard stopped")
        finally:
            handle.stop()
        return
    board = scoreboard(ws)
    if as_json:
        output.json_out(board.model_dump(mode="json"))
    else:
        print_board(board, table(board))


def print_board(board: Scoreboard, wide: Table) -> None:
    """The scoreboard as a table where it fits the terminal; else a block per seat, as the run
    summary does, each value on a line of its own and wrapped between words only."""
    from runner.workshop.scoreboard import failed
    from runner.workshop.summary import clock

    full = output.out.options.update_width(10**5)
    if Measurement.get(output.out, full, wide).maximum <= output.out.width:
        output.out.print(wide)
        return
    output.out.print(Text(f"workshop of lab {board.lab}"))
    for r in board.seats:
        output.out.print(Text(f"seat {r.seat}  {r.lab}  {r.state}"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, width=12)  # the widest label, "recovered at"
        grid.add_column(overflow="fold")  # a word longer than the line is the only fold
        rows = [
            *((("attendee", r.attendee),) if r.attendee else ()),
            ("scenario", r.scenario or "-"),
            ("elapsed", clock(r.elapsed_s)),
            ("hints", str(r.hints_used)),
            *(("shortcut", s) for s in r.shortcuts),
            ("acked at", clock(r.acked_at_s)),
            ("recovered at", clock(r.recovered_at_s)),
            *((("users failed", failed(r)),) if r.users_sent is not None else ()),
        ]
        if r.page_url:
            rows.append(("page", r.page_url))
        for label, value in rows:
            grid.add_row(Text(label), Text(value))  # a scenario's words are text, not markup
        output.out.print(Padding(grid, (0, 0, 0, 2), expand=False))


@workshop.command("down")
@lab_option
@click.option("--grace", type=click.FloatRange(0, 3600), default=60.0, show_default=True,
              help="Seconds a drill has to clean up after SIGINT before it is killed.")  # fmt: skip
@click.option("--jobs", type=click.IntRange(1, 32), default=None, help=JOBS_HELP)
@handled
def workshop_down(lab_path: Path, grace: float, jobs: int | None) -> None:
    """Stop every seat's drill (SIGINT: it cleans up; killed after --grace, then `gameday
    cleanup` for that seat), write the workshop's summary (summary.md and summary.html: per
    seat, acknowledged, recovered, hints, shortcuts), take every seat down and remove the
    workshop folder, then check that nothing of it is left. Exit 3, folder kept, when
    something is. A summary that cannot be written is said, and the rest still done."""
    from runner.workshop.seats import load_workshop, take_down
    from runner.workshop.summary import HTML, MARKDOWN

    ws = load_workshop(load_inventory(lab_path))
    try:
        for line in stop_all(ws, grace, jobs or ws.manifest.seats):
            output.message(line)
    finally:  # the seats' last status is gone once they are down: the summary comes first
        written = summarise(ws)
    left = take_down(ws, jobs or ws.manifest.seats)
    if left:
        raise LabError(
            "workshop down left: " + "; ".join(left),
            hint=f"gameday workshop down --lab {lab_path} again",
        )
    output.message(f"workshop of lab {ws.manifest.lab!r} is down: nothing of it is left")
    if written is not None:
        output.message(f"workshop summary: {written}/ ({MARKDOWN}, {HTML})")


def summarise(ws: Workshop) -> Path | None:
    """The workshop's summary written to its reports folder (a workshop whose manifest names
    none: the configured reports folder's workshops/); the folder, or None when it could not
    be written, which is said: the workshop still goes down."""
    from runner.workshop.seats import workshop_reports
    from runner.workshop.summary import summarise as collect
    from runner.workshop.summary import write_summary

    folder = (
        Path(ws.manifest.reports)
        if ws.manifest.reports is not None
        else workshop_reports(config().reports, ws.manifest.lab)
    )
    try:
        write_summary(collect(ws, folder), folder)
    except Exception as exc:  # whatever stops the summary, the seats still go down
        why = (str(exc).splitlines() or [""])[0]
        output.error(
            GamedayError(
                f"workshop summary not written to {folder}: {type(exc).__name__}: {why}",
                hint="the seats are taken down all the same",
            )
        )
        return None
    return folder


def stop_all(ws: Workshop, grace: float, jobs: int) -> list[str]:
    """Every seat's drill stopped; a killed one's lab cleaned up as `gameday cleanup` does."""
    from runner.labs import open_lab
    from runner.run.undo import cleanup_lab
    from runner.workshop.drills import drilling, stop_drill
    from runner.workshop.seats import for_each_seat

    lines: list[str] = []

    def stop(k: int) -> None:
        rec = drilling(ws, k)
        if rec is None:
            return
        if stop_drill(rec, grace):
            cleanup_lab(open_lab(ws.seat(k)))
            lines.append(f"seat {k}: drill killed after {grace:.0f} s; cleaned up")
        else:
            lines.append(f"seat {k}: drill stopped (it cleaned up)")

    errors = for_each_seat(ws.seats, stop, jobs)
    if errors:
        raise LabError(
            "; ".join(f"seat {k}: {str(e).splitlines()[0]}" for k, e in sorted(errors.items()))
        )
    return sorted(lines)
