"""`gameday init`: start using gameday in a repository (runner.spec.starter writes the files)."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli import output
from runner.cli.options import exit_codes, handled
from runner.spec.starter import write_starter


@click.command(
    epilog=exit_codes(
        (0, "the files are written"),
        (
            2,
            "a file it writes exists already (nothing written; --force overwrites), or one "
            "cannot be written",
        ),
    )
)
@click.option("--force", is_flag=True, help="Overwrite the files that exist already.")
@handled
def init(force: bool) -> None:
    """Write gameday's files into the current folder: gameday.toml, the lab (gameday/lab.yaml, a
    copy of the local lab that ships with gameday), an example scenario whose recovery runs the
    team's own script, the script, and CI jobs (GitHub Actions, GitLab CI). `gameday run` then
    runs the example and the built-in catalogue on the local lab."""
    cwd = Path.cwd()
    for path in write_starter(cwd, force):
        output.out.print(output.escape(str(path.relative_to(cwd))))
    output.message(
        "next: `gameday run` (the example and the built-in scenarios on the local lab; it needs "
        "prometheus, prometheus-node-exporter and prometheus-alertmanager installed)"
    )
