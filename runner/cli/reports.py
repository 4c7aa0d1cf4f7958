"""`gameday report` (a past run's summary, its reports written again) and `gameday history`
(each scenario's times over the runs in the reports folder)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from runner.cli import output
from runner.cli.options import VERDICT_EXIT, VERDICT_EXITS, exit_codes, handled, reports_option
from runner.errors import InputError


@click.command(epilog=VERDICT_EXITS.replace("every scenario", "every scenario of that run", 1))
@click.argument("run", required=False, metavar="[RUN]")
@reports_option
@handled
def report(run: str | None, reports_dir: Path) -> None:
    """Print a run's summary and write its reports again. RUN is a run id (a folder in the
    reports folder), `latest` (the default) or a path to a run folder or its result.json."""
    from runner.report import write_reports
    from runner.results.rundirs import find_run
    from runner.results.schema import load_result

    path = find_run(run, reports_dir)
    result = load_result(path)
    write_reports(result, path.parent)
    output.run_summary(result, str(path.parent))
    sys.exit(VERDICT_EXIT[result.verdict])


@click.command(
    epilog=exit_codes(
        (0, "shown (a regression is flagged in the output, not in the exit code)"),
        (2, "invalid input: no runs (or none readable), no run of SCENARIO, an unwritable path"),
    )
)
@click.argument("scenario", required=False)
@reports_option
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON.")
@click.option(
    "--html",
    "html_to",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="PATH",
    help="Also write an HTML page with a small chart per scenario to PATH (`-`: stdout).",
)
@handled
def history(scenario: str | None, reports_dir: Path, as_json: bool, html_to: Path | None) -> None:
    """Each scenario's time to fail, detect and recover over the past runs in the reports
    folder (oldest first, newest last) with each run's mode (run, drill, seat), and the change
    against the run of the same mode before (a run with runs, a drill with drills; a drill's
    time to recover is the people's wall seconds); a time to recover slower by
    more than 10% (or none where that run recovered) is flagged REGRESSED. SCENARIO: only that
    scenario's id."""
    from runner.report.trends_page import html
    from runner.results.trends import load_history

    h = load_history(reports_dir, scenario)
    for note in h.unreadable:
        output.message(f"not read: {note}")
    if html_to is not None:
        page = html(h)
        if str(html_to) == "-":
            sys.stdout.write(page)
            return
        try:
            html_to.parent.mkdir(parents=True, exist_ok=True)
            html_to.write_text(page)
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", file=html_to) from None
        output.message(f"wrote {html_to}")
    if as_json:
        output.json_out(h.model_dump(mode="json"))
    else:
        output.history_table(h)
