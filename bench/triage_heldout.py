"""`gameday triage` against a held-out set of real pasted logs, kept outside the repository so
that no test or entry can be tuned to it: how many failures of the catalogue it names, and how
many healthy or unrelated logs it wrongly flags.

    python bench/triage_heldout.py DIR [DIR ...] [--detail] [--in-process]

Each DIR holds the pasted logs (`NNN.log`, as the person pasted them) and an `INDEX.tsv` with a
header and one row per log, tab-separated: `file url class expected shown note`, where class is
`catalogue` (expected names the scenario), `related` (close to one, not it) or `healthy` (a
healthy log, or a failure the catalogue does not cover), and shown is `yes` where the paste holds
the failure's own lines (`no` where only the person's words tell it). The gatherer labels them
before the set is scored, without reading the project.

Prints per set: catalogue logs that show their failure and whose first finding is the expected
scenario (the acceptance figure), those named later or not at all, healthy logs flagged (false
positives), and, for information, the related logs and the catalogue logs that do not show the
failure. `--detail` lists each miss and each flag. It asserts nothing; `gameday` is the one in
this interpreter's environment. `--in-process` calls the same triage in this process, a log at
a time, with the built-in scenarios and the command's reading of the file and its refusals
(exit 2): about thirty times quicker (3.6 s against 118 s for three sets of 88 logs), since
starting a process per log is most of the time. bench/heldout-urls.txt keeps the addresses
each set took, so that the next set's gatherer can avoid them.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

GAMEDAY = Path(sys.executable).with_name("gameday")
CLASSES = ("catalogue", "related", "healthy")


@dataclass(frozen=True)
class Row:
    file: str
    url: str
    cls: str
    expected: str
    shown: bool
    note: str


def read_index(folder: Path) -> list[Row]:
    rows = []
    with (folder / "INDEX.tsv").open(encoding="utf-8", newline="") as f:
        for rec in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            cls = (rec.get("class") or "").strip()
            if cls not in CLASSES or not (folder / rec["file"].strip()).is_file():
                print(f"  skipped row {rec.get('file')!r}: class {cls!r} or no such file")
                continue
            rows.append(
                Row(
                    file=rec["file"].strip(),
                    url=(rec.get("url") or "").strip(),
                    cls=cls,
                    expected=(rec.get("expected") or "-").strip(),
                    shown=(rec.get("shown") or "").strip().lower() == "yes",
                    note=(rec.get("note") or "").strip(),
                )
            )
    return rows


def triage(folder: Path, rows: list[Row]) -> dict[str, list[str]]:
    """The scenarios named for each log, in the order the report lists them."""
    named: dict[str, list[str]] = {}
    for row in rows:  # one process a log: one log's refusal (exit 2) must not hide the others
        proc = subprocess.run(
            [str(GAMEDAY), "triage", "--json", str(folder / row.file)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode not in (0, 1):  # refused (2), or anything else: never "no finding"
            last = (proc.stderr.strip().splitlines() or [""])[-1][:100]
            named[row.file] = [f"<exit {proc.returncode}: {last}>"]
            continue
        entries = json.loads(proc.stdout or "[]")
        named[row.file] = [f["scenario"] for e in entries for f in e.get("findings", [])]
    return named


@cache
def _scenarios() -> list[Any]:
    """Every known scenario, as `gameday triage` loads them: once for all the sets."""
    from runner.cli.options import load_all

    return [e.loaded for e in load_all((), every_known=True)]


def triage_here(folder: Path, rows: list[Row]) -> dict[str, list[str]]:
    """As triage(), in this process: `gameday triage`'s file reading and budgets, every known
    scenario, a refusal (the command's exit 2) kept as such."""
    from runner.cli.main import _read_log
    from runner.errors import InputError
    from runner.triage import triage as do_triage

    loaded = _scenarios()
    named: dict[str, list[str]] = {}
    for row in rows:
        try:
            findings = do_triage(_read_log(str(folder / row.file)), loaded)
        except InputError as e:
            named[row.file] = [f"<exit 2: {str(e)[:100]}>"]
            continue
        named[row.file] = [f.scenario.scenario.metadata.id for f in findings]
    return named


def score(folder: Path, detail: bool, here: bool = False) -> None:
    rows = read_index(folder)
    named = triage_here(folder, rows) if here else triage(folder, rows)
    shown = [r for r in rows if r.cls == "catalogue" and r.shown]
    unshown = [r for r in rows if r.cls == "catalogue" and not r.shown]
    first = [r for r in shown if named[r.file][:1] == [r.expected]]
    later = [r for r in shown if r not in first and r.expected in named[r.file]]
    healthy = [r for r in rows if r.cls == "healthy"]
    flagged = [r for r in healthy if named[r.file]]
    related = [r for r in rows if r.cls == "related"]
    unshown_named = [r for r in unshown if r.expected in named[r.file]]
    pct = 100 * len(first) / len(shown) if shown else 0.0
    print(f"{folder}: {len(rows)} logs")
    print(f"  catalogue, shown: named first {len(first)}/{len(shown)} ({pct:.0f} %),")
    print(f"    named later {len(later)}, missed {len(shown) - len(first) - len(later)}")
    print(f"  healthy/unrelated flagged: {len(flagged)}/{len(healthy)}")
    print(f"  catalogue, not shown: named {len(unshown_named)}/{len(unshown)}")
    print(f"  related: flagged {sum(1 for r in related if named[r.file])}/{len(related)}")
    if detail:
        for r in shown:
            if r not in first:
                print(f"  MISS {r.file} expected {r.expected}, got {named[r.file]}  {r.url}")
        for r in flagged:
            print(f"  FLAG {r.file} healthy, got {named[r.file]}  {r.url}  ({r.note[:80]})")
        for r in related:
            if named[r.file]:
                print(f"  related {r.file} got {named[r.file]}  ({r.note[:80]})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--detail", action="store_true")
    parser.add_argument("--in-process", action="store_true", dest="here")
    args = parser.parse_args()
    for folder in args.dirs:
        score(folder, args.detail, args.here)


if __name__ == "__main__":
    main()
