"""`gameday drill`: a game day on one scenario (runner.drill), and `gameday drill ack|hint|stop`,
which reach a running drill of a lab through its page server (the `server.json` the drill
writes in its folder). Exit codes as `gameday run`'s: 0 recovered in time, 1 late or not at all
(timed out, gave up), 2 invalid input, 3 the drill could not be carried out, or (ack, hint,
stop) no drill with a page runs on that lab."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import httpx

from runner.cli import output
from runner.cli.drill_live import DrillView
from runner.cli.options import (
    VERDICT_EXIT,
    VERDICT_EXITS,
    handled,
    lab_option,
    load_all,
    reports_option,
)
from runner.drill.launch import run_drill
from runner.drill.server import HOST, check_listen, check_name, check_token, start_server
from runner.drill.session import Drill, DrillOptions, drill_folder
from runner.errors import InputError, LabError
from runner.fsutil import private_dir, read_bytes, write_private
from runner.labs import open_lab
from runner.run import Progress
from runner.spec.inventory_load import load_inventory

SERVER_FILE = "server.json"
VERBS = ("ack", "hint", "stop")


class _DrillGroup(click.Group):
    """`gameday drill SCENARIO ...` runs a drill; `gameday drill ack|hint|stop` are verbs."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["start", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_DrillGroup)
def drill() -> None:
    """Game days: `gameday drill SCENARIO` breaks the lab as a run does, then hands it over to
    people and watches (see `gameday drill start --help`); `gameday drill ack|hint|stop` act on
    the drill running on a lab. docs/drills-and-workshops.md
    'Game days: gameday drill'."""


@drill.command("start", epilog=VERDICT_EXITS)
@click.argument("scenario")
@lab_option
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=None,
    help="Wall seconds after the hand-over before the drill ends as timed out [default: the "
    "scenario's time-to-recover window (a person's wall seconds are real-world seconds, whatever "
    "the lab's scale), at least 600].",
)
@click.option("--page-port", type=click.IntRange(0, 65535), default=0, help="Port of the page.")
@click.option("--no-page", is_flag=True, help="Serve no page (use the terminal).")
@click.option(
    "--listen",
    default=HOST,
    show_default=True,
    help="The address the page listens on: an IPv4 address of this machine that others reach "
    "(never a wildcard). The page needs its token whatever the address.",
)
@click.option(
    "--public-name",
    default=None,
    help="The name browsers reach the page by, in its address [default: the --listen address].",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file holding the page's token (a workshop seat's, on its card) [default: a new "
    "random token].",
)
@click.option(
    "--seat",
    type=click.IntRange(1, 64),
    default=None,
    help="The workshop seat this lab is (a label on the drill's status and page; "
    "`gameday workshop start` sets it).",
)
@reports_option
@handled
def start(
    scenario: str,
    lab_path: Path,
    timeout_s: float | None,
    page_port: int,
    no_page: bool,
    listen: str,
    public_name: str | None,
    token_file: Path | None,
    seat: int | None,
    reports_dir: Path,
) -> None:
    """Drill SCENARIO (a file or an id, as `gameday run` takes): baseline, inject and confirm the
    failure as a run does, then hand the lab over. No recovery step runs: the drill watches the
    lab's events (a person's restarts, configuration changes and stops, whatever tool made
    them), the verify probes and the alerts, says at once when an action is a shortcut the
    scenario lists, and ends when the probes pass (recovered), at --timeout, on Ctrl-C or
    `gameday drill stop`; then it cleans up to the baseline as a run does. People's times are
    wall-clock seconds since the fault, which are real-world seconds (the time scale speeds up
    the lab, not the people): they meet the scenario's windows as they are; the time to detect
    (the first alert) is the system's, converted by the lab's time scale. Exit 0: recovered
    within the scenario's window; 1: late or not at all; 3: the drill could not be carried
    out."""
    entries = load_all((scenario,))
    if len(entries) != 1:
        raise InputError(f"a drill takes one scenario; {scenario!r} names {len(entries)}")
    inventory = load_inventory(lab_path)
    page = Page(
        port=page_port,
        host=check_listen(listen) if listen != HOST else HOST,
        public_name=check_name(public_name) if public_name else None,
        token=read_token(token_file) if token_file is not None else None,
    )
    options = DrillOptions(timeout_s=timeout_s, seat=seat)
    # On a terminal the drill's own view (rich Live, keys a/h/q) shows the phases: no second
    # live display beside it. Elsewhere (CI, a pipe) the run's timestamped progress lines and
    # the view's one line per event.
    live = output.err.is_terminal
    with contextlib.ExitStack() as stack:
        progress: Progress = (
            (lambda _: None) if live else stack.enter_context(output.ProgressLine())
        )

        def on_start(d: Drill) -> None:
            stack.enter_context(_served(d, page, no_page))
            stack.enter_context(DrillView(d.bus))

        outcome = run_drill(
            entries[0].loaded, inventory, reports_dir, progress, options=options, on_start=on_start
        )
    output.drill_summary(outcome.result, str(outcome.report_dir))
    sys.exit(VERDICT_EXIT[outcome.result.verdict])


@dataclass(frozen=True)
class Page:
    """Where and behind which token the drill's page is served."""

    port: int = 0
    host: str = HOST
    public_name: str | None = None
    token: str | None = None  # None: a new random one


def read_token(path: Path) -> str:
    """The token in `path` (a workshop seat's, written 0600 by `workshop up`)."""
    text = read_bytes(path, 4096, InputError, "token").decode("utf-8", "replace").strip()
    try:
        return check_token(text)
    except ValueError as exc:
        raise InputError(str(exc), file=path, field="--token-file") from None


@contextlib.contextmanager
def _served(d: Drill, page: Page, no_page: bool) -> Iterator[None]:
    """The page while the drill runs, and `server.json` saying where it is and its tokens (no
    page: url null), for `gameday drill ack|hint|stop`: the responders' page, and the
    facilitator's (its token is told only here and to the terminal that started the drill).
    The drill's folder is owner-only and server.json 0600: they hold the tokens."""
    folder = private_dir(drill_folder(d.lab))
    handle = (
        None
        if no_page
        else start_server(
            d.bus, page.port, page.host, token=page.token, public_name=page.public_name
        )
    )
    if handle is not None:
        output.message(f"drill page (responders): {handle.url}")
        output.message(f"facilitator's page: {handle.facilitator_url}")
    url = handle.url if handle is not None else None
    d.bus.update(d.bus.status.model_copy(update={"page_url": url}))
    info = folder / SERVER_FILE
    served = {
        "url": url,
        "local_url": handle.local_url if handle is not None else None,
        "token": handle.token if handle is not None else None,
        "facilitator_url": handle.facilitator_url if handle is not None else None,
        "pid": os.getpid(),
    }
    write_private(info, json.dumps(served))
    try:
        yield
    finally:
        info.unlink(missing_ok=True)
        if handle is not None:
            handle.stop()


def _post(lab_path: Path, path: str) -> str:
    folder = drill_folder(open_lab(load_inventory(lab_path)))
    try:
        info = json.loads((folder / SERVER_FILE).read_text())
    except FileNotFoundError:
        raise LabError(
            f"no drill is running on this lab (no {folder / SERVER_FILE})",
            hint="start one with `gameday drill SCENARIO`",
        ) from None
    except ValueError as exc:
        raise LabError(f"{folder / SERVER_FILE} is not readable: {exc}") from None
    if not _alive(info.get("pid")):
        raise LabError(f"no drill is running on this lab (pid {info.get('pid')} is gone)")
    if not info.get("url"):
        raise LabError(
            "the drill on this lab has no page (--no-page)",
            hint="use the keys in the drill's terminal",
        )
    # the page's address on this machine, its token in the path (a drill that listens on
    # another address for its attendees wrote both); the token goes to the drill alone, never
    # through a proxy from the environment
    base = str(info.get("local_url") or info["url"])
    try:
        url = base.rstrip("/") + "/" + path
        r = httpx.post(url, headers={"X-Gameday": "1"}, timeout=10, trust_env=False)
    except httpx.HTTPError as exc:
        raise LabError(f"the drill's page at {info['url']} did not answer: {exc}") from None
    if r.status_code >= 400:
        raise LabError(f"the drill's page refused: HTTP {r.status_code} {r.text[:200]}")
    return _answer(r)


def _answer(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()
    if isinstance(body, dict):
        return str(body.get("answer") or body.get("message") or body)
    return str(body)


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@drill.command("ack")
@lab_option
@handled
def ack(lab_path: Path) -> None:
    """Acknowledge the incident of the drill running on the lab (the first ack counts)."""
    output.message(_post(lab_path, "ack"))


@drill.command("hint")
@lab_option
@handled
def hint(lab_path: Path) -> None:
    """Release the next hint of the drill running on the lab."""
    output.message(_post(lab_path, "hint"))


@drill.command("stop")
@lab_option
@handled
def stop(lab_path: Path) -> None:
    """Give up the drill running on the lab: it cleans up to the baseline."""
    output.message(_post(lab_path, "give-up"))
