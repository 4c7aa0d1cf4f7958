"""The `gameday` command: a thin layer over the library. It catches only gameday's own errors and
maps them to exit codes:

    0  every scenario passed (or: triage recognised a known failure)
    1  an assertion failed (or: triage found no known failure)
    2  invalid input: scenario, inventory, arguments
    3  lab or infrastructure error (lab not up, port in use, an assertion gameday could not judge)
  130  interrupted by Ctrl-C
  143  interrupted by SIGTERM (a CI job cancelled); a run still writes the report of what ran

Every command's --help states its own (runner.cli.options.exit_codes).

The `lab` command group is in runner.cli.lab; the error mapping and the shared options in
runner.cli.options.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner import __version__
from runner.cli import output
from runner.cli.alerts import alerts
from runner.cli.drill import drill
from runner.cli.init import init
from runner.cli.lab import lab
from runner.cli.listing import list_, schema
from runner.cli.options import (
    AUTO,
    COMMON_EXITS,
    TOP_EXITS,
    VERDICT_EXIT,
    VERDICT_EXITS,
    check_writable,
    chosen,
    config,
    document_exits,
    dry_run_option,
    exit_codes,
    fail_fast_option,
    handled,
    lab_option,
    last_failed_option,
    load_all,
    output_path,
    parallel_option,
    reports_option,
    selection_options,
)
from runner.cli.reports import history, report
from runner.cli.watchdog import watchdog
from runner.cli.workshop import workshop
from runner.errors import GamedayError, InputError
from runner.fsutil import read_bytes
from runner.labs import open_lab
from runner.labs.capabilities import lacking
from runner.run.interrupt import shielded_from_sigint
from runner.run.selection import Selection
from runner.run.undo import cleanup_lab
from runner.spec.catalogue import builtin_dir, resolve
from runner.spec.checks import check_engine_names, check_unique_ids
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import check_scenario, load_inventory
from runner.spec.scenario import LoadedScenario, discover, load_scenario
from runner.triage import MAX_LINES as TRIAGE_MAX_LINES
from runner.triage import TIMEOUT_S as TRIAGE_TIMEOUT_S

if TYPE_CHECKING:
    from runner.run.capacity import AutoChoice
    from runner.run.suite import SuiteOutcome

MAX_LOG_BYTES = 256 * 1024 * 1024


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=TOP_EXITS)
@click.version_option(__version__, prog_name="gameday")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Results only: no progress or diagnostics on stderr (errors are still printed).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Diagnostics too: every progress line, and an error's traceback (a failure's detail "
    "is shown without it).",
)
def main(quiet: bool, verbose: bool) -> None:
    """Chaos-engineering scenarios for LLM-serving stacks: inject a fault, assert the failure
    signature and time-to-fail, walk the recovery path, verify service is back.

    Results go to stdout, progress and diagnostics to stderr."""
    if quiet and verbose:
        raise click.UsageError("-q and -v exclude each other")
    output.set_level(
        output.Level.QUIET if quiet else output.Level.VERBOSE if verbose else output.Level.NORMAL
    )


main.add_command(lab)
main.add_command(drill)
main.add_command(workshop)
main.add_command(watchdog)
main.add_command(report)
main.add_command(history)
main.add_command(list_)
main.add_command(schema)
main.add_command(alerts)
main.add_command(init)


@main.command(epilog=VERDICT_EXITS)
@click.argument("scenarios", nargs=-1)
@selection_options
@lab_option
@reports_option
@parallel_option
@fail_fast_option
@last_failed_option
@dry_run_option
@click.option(
    "--json",
    "json_to",
    is_flag=False,
    flag_value="-",
    default=None,
    metavar="[PATH.json]",
    help="Alone: print result.json to stdout instead of the table. With PATH.json: write a "
    "copy of result.json there (parent folders made) and print the table as usual. With "
    "--dry-run (no PATH): the plans as JSON. A scenario written right after it is run, "
    "not taken for a PATH.",
)
@output_path("junit", "junit.xml")
@output_path("html", "report.html")
@handled
def run(
    scenarios: tuple[str, ...],
    selection: Selection,
    lab_path: Path,
    reports_dir: Path,
    parallel: str,
    fail_fast: bool,
    failed_only: bool,
    dry_run: bool,
    json_to: str | None,
    junit_to: Path | None,
    html_to: Path | None,
) -> None:
    """Run scenarios: files, folders or ids (default: the team's folders from gameday.toml,
    then the built-in catalogue), those that apply to the lab.

    A scenario's own `command`, `playbook` and `http` steps run in its folder with the lab's
    facts (GAMEDAY_LAB, GAMEDAY_NODE_<NAME>_URL, ...) in their environment; docs/scenario-format.md
    'User-written steps'."""
    from runner.run.capacity import overload
    from runner.run.suite import RunInterrupted, run_suite

    scenarios, json_to = _json_or_scenario(scenarios, json_to)
    scenarios, asked = _parallel_or_scenario(scenarios, parallel)
    json_file = _json_path(json_to)
    copies = {"junit.xml": junit_to, "result.json": json_file, "report.html": html_to}
    if dry_run:
        _refuse_copies_in_dry_run(copies)
    for dest in copies.values():
        if dest is not None:
            check_writable(dest)
    loaded = chosen(scenarios, selection, failed_only, reports_dir)
    inventory = load_inventory(lab_path)
    choice = _auto(loaded, inventory) if asked == AUTO or dry_run else None
    if asked == AUTO:
        assert choice is not None
        n = choice.n
        if not dry_run:
            output.message(choice.sentence())
    else:
        n = int(asked)
    if over := overload(inventory, min(n, len(loaded))):
        output.warning(over.sentence(), hint=over.hint())
    if dry_run:
        print_plans(loaded, inventory, json_to is not None, choice)
        return
    try:
        with output.ProgressLine() as progress:
            outcome = run_suite(
                loaded, inventory, reports_dir, progress, parallel=n, fail_fast=fail_fast
            )
    except RunInterrupted as stopped:  # the report of what ran, then the interrupt's exit code
        with shielded_from_sigint():
            _reported(stopped.outcome, copies, json_to)
        raise
    _reported(outcome, copies, json_to)
    sys.exit(VERDICT_EXIT[outcome.result.verdict])


def _reported(outcome: SuiteOutcome, copies: dict[str, Path | None], json_to: str | None) -> None:
    """The run's copies made where asked, and its summary (or result.json) printed."""
    from runner.results.rundirs import copy_reports

    copy_reports(outcome.report_dir, copies)
    if json_to == "-":
        output.json_out(json.loads(outcome.result.model_dump_json()))
    else:
        output.run_summary(outcome.result, str(outcome.report_dir))


def _refuse_copies_in_dry_run(copies: dict[str, Path | None]) -> None:
    """A dry run writes no reports, so a copy of one has nothing to copy."""
    option = {"junit.xml": "--junit", "result.json": "--json PATH.json", "report.html": "--html"}
    asked = [option[name] for name, dest in copies.items() if dest is not None]
    if asked:
        raise InputError(
            f"--dry-run writes no reports: {', '.join(asked)} would have nothing to copy",
            hint="drop them for a dry run (`--json` alone prints the plans as JSON)",
        )


def _json_or_scenario(
    scenarios: tuple[str, ...], json_to: str | None
) -> tuple[tuple[str, ...], str | None]:
    """`run --json tp-mismatch`: click hands the scenario to --json as its PATH. A value that
    does not end in .json but names a scenario (an id, a .yaml/.yml file, a folder) is taken
    back as the first scenario to run (click does not tell where among the others it stood),
    and --json prints to stdout. Anything else (/dev/stdout, a file without .json) is left to
    _json_path's refusal."""
    if json_to is None or json_to == "-" or json_to.endswith(".json"):
        return scenarios, json_to
    path = Path(json_to)
    if path.is_dir() or (path.suffix in (".yaml", ".yml") and path.is_file()):
        return (json_to, *scenarios), "-"  # a scenario file or folder: its own errors apply
    if path.exists():
        return scenarios, json_to
    try:
        load_all((json_to,))
    except GamedayError:
        return scenarios, json_to
    return (json_to, *scenarios), "-"


def _parallel_or_scenario(scenarios: tuple[str, ...], value: str) -> tuple[tuple[str, ...], str]:
    """`run --parallel tp-mismatch`: click hands the scenario to --parallel as its N (--parallel
    alone means auto). A value that is neither a number nor `auto` but names a scenario is taken
    back as the first scenario to run, and --parallel is auto; anything else is refused."""
    from runner.run.parallel import MAX_PARALLEL

    if value == AUTO:
        return scenarios, AUTO
    try:
        n = int(value)
    except ValueError:
        try:
            load_all((value,))
        except GamedayError:
            raise InputError(
                f"--parallel {value}: neither a number, nor auto, nor a scenario",
                field="--parallel",
                hint=f"--parallel N (1..{MAX_PARALLEL}) or --parallel auto",
            ) from None
        return (value, *scenarios), AUTO
    if not 1 <= n <= MAX_PARALLEL:
        raise InputError(
            f"--parallel must be 1..{MAX_PARALLEL} or auto, not {value}", field="--parallel"
        )
    return scenarios, str(n)


def _auto(loaded: list[LoadedScenario], inventory: Inventory) -> AutoChoice:
    """What --parallel auto picks for the scenarios of these that apply to the lab."""
    from runner.run.capacity import auto_parallel
    from runner.run.suite import applies

    lab = open_lab(inventory)  # opened, never contacted
    return auto_parallel(inventory, sum(applies(ls, lab) for ls in loaded))


def _json_path(value: str | None) -> Path | None:
    """`--json PATH.json`'s file (`--json` alone prints to stdout). Any other value is refused:
    it is neither a file to write nor a scenario."""
    if value is None or value == "-":
        return None
    if not value.endswith(".json"):
        raise InputError(
            f"--json {value}: neither a .json file to write nor a scenario",
            hint="`--json` alone prints result.json to stdout; `--json PATH.json` keeps a copy",
        )
    return Path(value)


def print_plans(
    loaded: list[LoadedScenario],
    inventory: Inventory,
    as_json: bool,
    choice: AutoChoice | None = None,
) -> None:
    """The plans; in text, last, what `--parallel auto` would pick and why (JSON keeps the list
    of plans it has always been)."""
    from runner.run.plan import plan_scenario, render

    lab = open_lab(inventory)  # opened, never contacted
    plans = [plan_scenario(ls, lab) for ls in loaded]
    if as_json:
        output.json_out([p.model_dump(mode="json") for p in plans])
        return
    for p in plans:
        output.out.print("\n".join(output.escape(line) for line in render(p)))
    if choice is not None:
        output.out.print(output.escape(choice.sentence().replace("auto:", "auto would run", 1)))


@main.command(epilog=COMMON_EXITS)
@click.argument("scenarios", nargs=-1)
@selection_options
@lab_option
@reports_option
@last_failed_option
@click.option("--json", "as_json", is_flag=True, help="Print the plans as JSON.")
@handled
def plan(
    scenarios: tuple[str, ...],
    selection: Selection,
    lab_path: Path,
    reports_dir: Path,
    failed_only: bool,
    as_json: bool,
) -> None:
    """What a run would do, without touching the lab: per scenario, the actions on each node
    (and the engine configuration they lead to), the expected failure and its windows in real
    and lab seconds, the alerts, the recovery steps in order, the verification, and what the lab
    cannot do; last, how many instances `run --parallel auto` would run and why. Scenarios are
    chosen as for `run`."""
    loaded = chosen(scenarios, selection, failed_only, reports_dir)
    inventory = load_inventory(lab_path)
    print_plans(loaded, inventory, as_json, None if as_json else _auto(loaded, inventory))


@main.command(
    epilog=exit_codes((0, "every file is valid"), (2, "a file is invalid (each is named)"))
)
@click.argument("paths", nargs=-1)
@click.option(
    "--lab",
    "check_lab",
    type=click.Path(path_type=Path),
    default=None,
    help="Also check that every node the scenarios for this lab name is one of its hosts.",
)
@handled
def validate(paths: tuple[str, ...], check_lab: Path | None) -> None:
    """Check scenario and inventory files, folders or scenario ids (default: the team's folders
    from gameday.toml, or the built-in catalogue when it names none; inventories/ and the
    configured lab)."""
    lab_path = check_lab
    targets = [_by_id(p) for p in paths] or _validate_defaults()
    files = discover(targets)
    if not files:
        raise InputError("nothing to validate", file=", ".join(map(str, targets)))
    inventory = load_inventory(lab_path) if lab_path is not None else None
    lab = open_lab(inventory) if inventory is not None else None  # reads nothing yet
    errors: list[GamedayError] = []
    loaded: list[LoadedScenario] = []
    for f in files:
        try:
            notes: list[str] = []
            if _is_inventory(f):
                load_inventory(f)
            else:
                ls = load_scenario(f)
                check_engine_names(ls, inventory)
                loaded.append(ls)
                if inventory is not None and lab is not None:
                    if inventory.lab.kind in ls.scenario.labs:
                        check_scenario(ls, inventory)
                        notes = lacking(ls.scenario, lab)
                    else:
                        notes = [f"not on this lab: applies to {_kinds(ls)} only"]
                        if why := ls.scenario.lab_notes.get(inventory.lab.kind):
                            notes.append(f"why: {' '.join(why.split())}")
            output.out.print(output.escape(f"ok  {f}" + "".join(f"\n    {n}" for n in notes)))
        except InputError as exc:
            errors.append(exc)
            output.error(exc)
    try:
        check_unique_ids(loaded)
    except InputError as exc:
        errors.append(exc)
        output.error(exc)
    if errors:
        sys.exit(2)


def _by_id(arg: str) -> Path:
    """The argument as a path, or the file of the scenario with that id."""
    if Path(arg).exists():
        return Path(arg)
    return resolve((arg,), config().scenarios)[0].loaded.path


def _validate_defaults() -> list[Path]:
    cfg = config()
    targets = list(cfg.scenarios) or [builtin_dir()]
    if Path("inventories").is_dir():
        targets.append(Path("inventories"))
    if cfg.file is not None and cfg.lab.is_file():
        targets.append(cfg.lab)
    return targets


def _kinds(ls: LoadedScenario) -> str:
    return ", ".join(k.value for k in ls.scenario.labs)


def _is_inventory(path: Path) -> bool:
    try:
        if not path.is_file():  # a device or FIFO is refused by the loader, not read here
            return False
        with path.open("rb") as f:
            head = f.read(4000).decode("utf-8", errors="replace")
    except OSError:
        return False
    return any(line.rstrip() == "all:" for line in head.splitlines())


@main.command()
@click.argument("logfiles", nargs=-1, required=True)
@click.option(
    "--scenarios",
    "scenario_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Recognise only the scenarios in this folder [default: the team's folders from "
    "gameday.toml, then the built-in catalogue].",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the findings as JSON on stdout (one entry per log: scenario, phase, each "
    "node's view with the evidence's line numbers, advice, recovery).",
)
@click.option(
    "--max-lines",
    type=click.IntRange(1),
    default=TRIAGE_MAX_LINES,
    show_default=True,
    help="Refuse a log of more lines than this (exit 2), before reading it.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(0, min_open=True),
    default=TRIAGE_TIMEOUT_S,
    show_default=True,
    help="Stop a log not triaged within this many seconds (exit 2; nothing is concluded).",
)
@handled
def triage(
    logfiles: tuple[str, ...],
    scenario_dir: Path | None,
    as_json: bool,
    max_lines: int,
    timeout_s: float,
) -> None:
    """Name the known failures in pasted or captured logs; `-` is stdin.

    Reads a log as people paste it: `kubectl logs` (with --timestamps or --prefix), `docker logs
    -t`, `docker compose logs`, journald, quoted in a chat or a Markdown fence, wrapped at a
    terminal's width, with digits masked as xxx. Every signature a scenario declares counts,
    another node's (`elsewhere`) included; several failures are listed in the order they first
    appear (an engine's death after the failures of its run that caused it), each with whose
    view the log is, the phase its lines show, and advice computed from its numbers (e.g. the
    --max-model-len and --gpu-memory-utilization a KV shortage needs).
    """
    from runner.cli.triage_view import as_dict, as_lines
    from runner.triage import triage as do_triage

    args = (str(scenario_dir),) if scenario_dir is not None else ()
    loaded = [e.loaded for e in load_all(args, every_known=True)]
    any_found = False
    report: list[dict[str, Any]] = []
    for name in logfiles:
        findings = do_triage(_read_log(name), loaded, max_lines, timeout_s)
        any_found |= bool(findings)
        report.append(as_dict(name, findings))
        if not as_json:
            for line in as_lines(name, findings):
                output.out.print(line)
    if as_json:
        output.json_out(report)
    sys.exit(0 if any_found else 1)


@main.command()
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--year", type=click.IntRange(1, 9999), default=None, help="Year for stamps that carry none."
)
@click.option("--match", "pattern", default=None, help="Only lines matching this regex.")
@handled
def timeline(logs: tuple[str, ...], year: int | None, pattern: str | None) -> None:
    """Merge logs into one UTC timeline. LOG is FILE or FILE@ZONE (e.g. host.log@Asia/Seoul):
    the zone of stamps that do not carry one (vLLM's, syslog's); default UTC. Lines stamped by a
    container runtime (RFC 3339 with Z or an offset) carry their own."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from runner.cli.timestamps import merge
    from runner.spec.patterns import compile_user

    sources = []
    for spec in logs:
        name, _, zone_name = spec.partition("@")
        try:
            zone = ZoneInfo(zone_name) if zone_name else UTC
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory (America)
            raise InputError(
                f"unknown time zone {zone_name!r}",
                file=name,
                hint="an IANA zone such as Asia/Seoul or UTC",
            ) from None
        text = _read_log(name)
        sources.append((name, text, zone, year or datetime.now(UTC).year))
    rx = None
    if pattern:
        try:
            rx = compile_user(pattern)
        except ValueError as exc:
            raise InputError(f"--match: {exc}") from None
    for s in merge(sources):
        if rx is None or rx.search(s.text):
            output.out.print(
                f"{s.utc.isoformat(timespec='milliseconds')} {output.escape(s.source)} "
                f"{output.escape(f'[{s.zone}]')} {output.escape(s.text)}"
            )


def _read_log(name: str) -> str:
    """A log file named on the command line (`-`: stdin), at most MAX_LOG_BYTES of it."""
    if name == "-":
        data = sys.stdin.buffer.read(MAX_LOG_BYTES + 1)
        if len(data) > MAX_LOG_BYTES:
            raise InputError(f"log is larger than {MAX_LOG_BYTES} bytes", file="<stdin>")
    else:
        data = read_bytes(name, MAX_LOG_BYTES, InputError, "log")
    return data.decode("utf-8", errors="replace")


@main.command()
@lab_option
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="The N of the `run --parallel N` that was interrupted: undo on each of its N "
    "instances of the lab.",
)
@click.option(
    "--expired",
    is_flag=True,
    help="Only once the fault lease on the adopted deployment has run out (its runner is "
    "gone): what cron or a Kubernetes CronJob runs. Without this machine's journal (a CronJob), "
    "the lease's own record puts the deployment back.",
)
@handled
def cleanup(lab_path: Path, parallel: int, expired: bool) -> None:
    """Undo whatever an interrupted run left on the lab (idempotent); with --parallel N, on
    each of the N instances a `run --parallel N` used. Journalled undos of user-written steps run
    too, and the baseline is re-applied where a user step had no undo."""
    from runner.run.parallel import check_parallel, instance

    inventory = load_inventory(lab_path)
    check_parallel(inventory, parallel)
    if expired:
        _cleanup_expired(inventory)
        return
    for k in range(parallel):
        inst = instance(inventory, k)
        outcome = cleanup_lab(open_lab(inst))
        name = inst.lab.name
        if outcome.redeployed:
            output.message(
                f"lab {name!r}: left {', '.join(outcome.redeployed)} as the team deployed it "
                "anew since adoption (gameday lab up --readopt takes it as the baseline)"
            )
        if not outcome.open_changes and not outcome.restarted:
            output.message(f"lab {name!r}: nothing to undo")
        elif outcome.lab_was_down:
            for line in outcome.steps:  # processes a killed run's steps left running
                output.message(line)
            output.message(
                f"lab {name!r} is down: {outcome.open_changes} journalled change(s) need no "
                "undo (it starts from its baseline)"
            )
        else:
            for line in outcome.steps:
                output.message(line)
            for c in outcome.applied:
                output.message(f"restored {c.node}: {c.kind.value} {c.subject}".rstrip())
            output.message(f"lab {name!r}: undid {outcome.open_changes} change(s)")
        for group in outcome.restarted:
            output.message(f"restarted {', '.join(group)} together: they were not serving")


def _cleanup_expired(inventory: Inventory) -> None:
    """`cleanup --expired`: nothing while the adopted deployment's lease holds; once it has run
    out, the journal's undo where this machine has it, then the lease's own record."""
    if inventory.lab.adopt is None:
        raise InputError(
            f"lab {inventory.lab.name!r} adopts no deployment: only an adopted one holds a "
            "fault lease",
            file=inventory.path,
            hint=f"gameday cleanup --lab {inventory.path}",
        )
    lab = open_lab(inventory)
    name = inventory.lab.name
    ends = lab.lease()
    now = datetime.now(UTC)
    if ends is None:
        output.message(f"lab {name!r}: no fault lease is held; nothing to undo")
        return
    if ends > now:
        output.message(
            f"lab {name!r}: the fault lease holds until {ends.isoformat(timespec='seconds')} "
            f"({(ends - now).total_seconds():.0f} s from now); nothing was touched"
        )
        return
    late = f"the fault lease ran out at {ends.isoformat(timespec='seconds')}"
    if lab.is_up():  # this machine's journal: every undo, user steps' too
        outcome = cleanup_lab(lab)
        for c in outcome.applied:
            output.message(f"restored {c.node}: {c.kind.value} {c.subject}".rstrip())
        if outcome.redeployed:
            output.message(f"left {', '.join(outcome.redeployed)} as the team deployed it anew")
    back = lab.end_lease()
    for node in back:
        output.message(f"restored {node} from the lease's record")
    output.message(f"lab {name!r}: {late}; gameday's changes are undone and the lease dropped")


triage.epilog = exit_codes(
    (0, "a known failure is recognised in at least one log"),
    (1, "no known failure in any log"),
    (
        2,
        "invalid input (a log file that cannot be read, a scenario folder that does not load), "
        "or a log over the budget: more lines than --max-lines, or not triaged within --timeout",
    ),
)
document_exits(main, COMMON_EXITS)


if __name__ == "__main__":
    main()
