"""What every `gameday` command shares: the mapping of gameday's errors to exit codes (and of
SIGTERM to an interrupt), the options several commands take, the configuration (runner.spec.config)
that fills in `--lab` and `--reports` when they are not given, and the choice of scenarios from
the arguments and the selection options."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from functools import cache, wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from runner.cli import output
from runner.errors import GamedayError, InputError, ScenarioError
from runner.results.schema import Interruption, Verdict
from runner.run.interrupt import Terminated, interruption
from runner.run.selection import Selection, last_failed
from runner.spec.catalogue import Entry, resolve
from runner.spec.config import Config, load_config
from runner.spec.scenario import LoadedScenario

F = TypeVar("F", bound=Callable[..., Any])


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated  # SIGTERM (a CI timeout, `kill`) cleans up like Ctrl-C


EXIT_SIGINT = 130  # 128 + SIGINT, as a shell reports a program Ctrl-C ended
EXIT_SIGTERM = 143  # 128 + SIGTERM: CI tells a cancelled job from a failed one
# the exit code of a command that ends with a verdict (run, drill, report)
VERDICT_EXIT = {
    Verdict.PASSED: 0,
    Verdict.SKIPPED: 0,
    Verdict.FAILED: 1,
    Verdict.ERROR: 3,
    Verdict.INCONCLUSIVE: 3,
}


def interrupted_exit(exc: KeyboardInterrupt) -> int:
    return EXIT_SIGTERM if interruption(exc) is Interruption.SIGTERM else EXIT_SIGINT


def handled(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        signal.signal(signal.SIGTERM, _terminate)
        try:
            # an option left out comes from the configuration, read only when one is left out
            if "lab_path" in kwargs and kwargs["lab_path"] is None:
                kwargs["lab_path"] = config().lab
            if "reports_dir" in kwargs and kwargs["reports_dir"] is None:
                kwargs["reports_dir"] = config().reports
            return fn(*args, **kwargs)
        except GamedayError as exc:
            output.error(exc)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            output.message("interrupted (cleanup ran; `gameday cleanup` undoes anything left)")
            sys.exit(interrupted_exit(exc))

    return wrapper  # type: ignore[return-value]


@cache
def config() -> Config:
    """The configuration that applies in the current folder (read once per process)."""
    return load_config()


AUTO = "auto"
parallel_option = click.option(
    "--parallel",
    is_flag=False,
    flag_value=AUTO,
    default="1",
    show_default=True,
    metavar="[N|auto]",
    help="Run the scenarios on N isolated instances of the lab at once (on Kubernetes: a "
    "namespace each). `auto` (or --parallel alone): as many as this machine holds, from its free "
    "cores, its memory and the lab's measured cost per instance (`gameday plan` says what auto "
    "picks and why). A scenario written right after it is run, not taken for N.",
)
reports_option = click.option(
    "--reports",
    "reports_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where run directories go [default: $GAMEDAY_REPORTS, else `reports` in gameday.toml "
    "or [tool.gameday], else reports/].",
)
lab_option = click.option(
    "--lab",
    "lab_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Inventory of the lab to use [default: $GAMEDAY_LAB, else `lab` in gameday.toml or "
    "[tool.gameday], else inventories/local.yaml if it exists, else the local lab that ships with "
    "gameday].",
)


def selection_options(fn: F) -> F:
    """-k, --tag and --exclude-tag, passed to the command as one `selection`."""

    @click.option(
        "-k",
        "keyword",
        default=None,
        metavar="EXPR",
        help="Only scenarios whose id or title contains these words (case-insensitive), joined "
        "by and, or, not and parentheses: -k 'kv or (tp and not head)'.",
    )
    @click.option(
        "--tag", "tags", multiple=True, metavar="TAG", help="Only scenarios with one of these tags."
    )
    @click.option(
        "--exclude-tag",
        "exclude_tags",
        multiple=True,
        metavar="TAG",
        help="Leave out scenarios with this tag.",
    )
    @wraps(fn)
    def wrapper(
        *args: Any,
        keyword: str | None,
        tags: tuple[str, ...],
        exclude_tags: tuple[str, ...],
        **kw: Any,
    ) -> Any:
        return fn(*args, selection=Selection(keyword, tags, exclude_tags), **kw)

    return wrapper  # type: ignore[return-value]


def load_all(args: tuple[str, ...], *, every_known: bool = False) -> list[Entry]:
    """The scenarios the arguments name (files, folders or ids); none: the team's folders, then
    the built-in catalogue, unless the configuration leaves it out of default runs and
    `every_known` (triage recognises every known failure) does not ask for it."""
    entries = resolve(args, config().scenarios, every_known or config().builtin)
    if not entries:
        raise ScenarioError(
            "no scenario files found",
            file=", ".join(args),
            hint="pass scenario files, folders or ids"
            + ("" if config().builtin else f" (builtin = false in {config().file})"),
        )
    return entries


def chosen(
    args: tuple[str, ...], selection: Selection, failed_only: bool, reports_dir: Path
) -> list[LoadedScenario]:
    """The scenarios a `run` or `plan` works on: named, selected, and with --last-failed those
    that failed or errored in the latest run (none recorded: all, as pytest does)."""
    loaded = selection([e.loaded for e in load_all(args)])
    if failed_only:
        lf = last_failed(reports_dir)
        if lf.run is None:
            output.message(f"--last-failed: no run in {reports_dir}: all selected scenarios")
        elif not lf.ids:
            output.message(f"--last-failed: nothing failed in {lf.run}: all selected scenarios")
        else:
            loaded = [ls for ls in loaded if ls.scenario.metadata.id in lf.ids]
            output.message(f"--last-failed: {len(loaded)} that failed in {lf.run}")
    if not loaded:
        raise InputError(
            "no scenario is selected",
            hint="`gameday list` with the same -k/--tag shows what matches",
        )
    return loaded


fail_fast_option = click.option(
    "--fail-fast",
    is_flag=True,
    help="Stop after the first scenario that fails or errs; the rest are skipped (not run).",
)
last_failed_option = click.option(
    "--last-failed",
    "failed_only",
    is_flag=True,
    help="Only the scenarios that failed or errored in the latest run in the reports folder "
    "(none recorded there: all of them, as pytest does).",
)
dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Print the plan (see `gameday plan`) and touch nothing."
)


def exit_codes(*rows: tuple[int, str]) -> str:
    """A command's --help epilog: its exit codes, one a line (click keeps a `\b` paragraph as
    written)."""
    return "\b\nExit codes:\n" + "\n".join(f"  {code:<3}  {what}" for code, what in rows)


EXIT_INPUT = (2, "invalid input: scenario, inventory, arguments, a path that cannot be written")
EXIT_LAB = (3, "lab or infrastructure error (lab not up, port in use, ...)")
EXIT_INTERRUPTED = (EXIT_SIGINT, "interrupted by Ctrl-C")
EXIT_TERMINATED = (EXIT_SIGTERM, "interrupted by SIGTERM (a CI job cancelled, `kill`)")
COMMON_EXITS = exit_codes((0, "done"), EXIT_INPUT, EXIT_LAB, EXIT_INTERRUPTED, EXIT_TERMINATED)
TOP_EXITS = (
    exit_codes(
        (0, "done: every scenario passed, triage recognised a failure, a check held"),
        (1, "an assertion failed, triage found no known failure, a check did not hold"),
        EXIT_INPUT,
        EXIT_LAB,
        EXIT_INTERRUPTED,
        EXIT_TERMINATED,
    )
    + "\n\nEach command's --help says what its own codes mean."
)
VERDICT_EXITS = exit_codes(
    (0, "every scenario passed (or was skipped)"),
    (1, "an assertion failed"),
    EXIT_INPUT,
    (3, "lab or infrastructure error, or inconclusive: a window missed only by the machine's load"),
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
)


def document_exits(group: click.Group, epilog: str) -> None:
    """Give every command under `group` that states no exit codes of its own `epilog`."""
    for cmd in group.commands.values():
        if isinstance(cmd, click.Group):
            document_exits(cmd, epilog)
        if not cmd.epilog:
            cmd.epilog = epilog


def output_path(name: str, what: str) -> Callable[[F], F]:
    """`--NAME PATH`: also write the run's `what` there (parent folders made)."""
    return click.option(
        f"--{name}",
        f"{name}_to",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="PATH",
        help=f"Also write the run's {what} to PATH (its parent folders are made).",
    )


def check_writable(dest: Path) -> None:
    """InputError unless `dest` can be written as a file (checked before a run starts, so that a
    typo does not surface after a long run)."""
    if dest.is_dir():
        raise InputError("is a folder, not a file", file=dest, hint="name a file")
    parent = dest.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{parent} is not a folder", file=dest, hint="name a file in a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{parent} is not writable", file=dest, hint="name a writable place")
