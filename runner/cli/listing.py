"""`gameday list` (the scenarios there are, and where each comes from) and `gameday schema` (the
scenario format as JSON Schema)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from runner.cli import output
from runner.cli.options import handled, load_all, selection_options
from runner.run.selection import Selection
from runner.spec.catalogue import BUILTIN, Entry
from runner.spec.scenario import json_schema


@click.command("list")
@click.argument("scenarios", nargs=-1)
@selection_options
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@handled
def list_(scenarios: tuple[str, ...], selection: Selection, as_json: bool) -> None:
    """List scenarios: id, labs, title, and where each comes from (`builtin`: the catalogue
    that ships with gameday; a team file with a built-in id overrides it)."""
    entries = load_all(scenarios)
    keep = {id(ls) for ls in selection([e.loaded for e in entries])}
    entries = [e for e in entries if id(e.loaded) in keep]
    if as_json:
        output.json_out([_row(e) for e in entries])
        return
    for e in entries:
        md, labs = e.loaded.scenario.metadata, ",".join(k.value for k in e.loaded.scenario.labs)
        source = e.origin + (f" (overrides {BUILTIN})" if e.overrides else "")
        output.out.print(
            f"{output.escape(md.id):<28} {labs:<26} {output.escape(md.title)}  "
            + output.escape(f"[{source}]")
        )


def _row(e: Entry) -> dict[str, Any]:
    sc = e.loaded.scenario
    return {
        "id": sc.metadata.id,
        "title": sc.metadata.title,
        "labs": [k.value for k in sc.labs],
        "file": str(e.loaded.path),
        "tags": sc.metadata.tags,
        "source": e.origin,
        "overrides_builtin": e.overrides,
    }


@click.command()
@click.option(
    "--output",
    "-o",
    "dest",
    type=click.Path(path_type=Path),
    default=None,
    help="Write to this file instead of stdout.",
)
@handled
def schema(dest: Path | None) -> None:
    """Print the scenario format as JSON Schema (for editors)."""
    text = json.dumps(json_schema(), indent=2) + "\n"
    if dest is None:
        sys.stdout.write(text)
    else:
        dest.write_text(text)
