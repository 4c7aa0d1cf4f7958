"""The order in which `run --parallel N`'s workers take the scenarios: longest first.

Each worker takes the next scenario when it is free, so the run ends when its busiest instance
does. Taken in the files' order, a long scenario that comes last starts when the others are
nearly done and runs alone at the end; taken longest first (the LPT rule of list scheduling),
the short ones fill in around the long ones. How long a scenario takes is what it took in the
latest runs of the same lab at the same time scale in the reports folder, as a test splitter
reads its last timings. A scenario with no such run is taken first, in the files' order: not
knowing its length, the run does not risk finding it at the end.

This is a hint for the order only: results and reports keep the scenarios' order, and a
reports folder that cannot be read leaves the files' order as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from runner.results.rundirs import run_dirs
from runner.spec.inventory import Inventory
from runner.spec.scenario import LoadedScenario

# the newest runs read for durations: enough to cover a suite run in parts, few enough that a
# large reports folder costs the run nothing it would notice
RUNS_READ = 20
# what a scenario's length is taken from: a run that ended in one of these went the whole way
# (an error or a skip stops early and says nothing of how long the scenario takes)
_MEASURED = frozenset({"passed", "failed", "inconclusive"})


@dataclass(frozen=True)
class Order:
    """The scenarios as the workers take them, and how many of them had a measured length."""

    scenarios: list[LoadedScenario]
    known: int
    runs_read: int

    def sentence(self) -> str:
        total = len(self.scenarios)
        if not self.known:
            return "no earlier run of these scenarios on this lab: taken in the files' order"
        known = (
            "all known"
            if self.known == total
            else f"{self.known} of {total} known, the others first"
        )
        return (
            f"longest first, by their wall time in the latest of {self.runs_read} earlier "
            f"run(s) of this lab ({known})"
        )


def _seconds(s: dict[str, Any]) -> float | None:
    try:
        started = datetime.fromisoformat(str(s["started_at"]))
        wall = (datetime.fromisoformat(str(s["finished_at"])) - started).total_seconds()
    except (KeyError, ValueError, TypeError):  # TypeError: one time with a zone, one without
        return None
    return wall if wall >= 0 else None


def last_durations(reports_root: Path, inventory: Inventory) -> tuple[dict[str, float], int]:
    """Each scenario's wall seconds in the newest run of the same lab (name, kind and time
    scale) that took it the whole way, from the newest RUNS_READ runs of any lab; and how many
    of them were this lab's. Runs that cannot be read are passed over: this is a hint."""
    lab = inventory.lab
    durations: dict[str, float] = {}
    read = 0
    for run_dir in reversed(run_dirs(reports_root)[-RUNS_READ:]):
        try:
            result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
            info = result["lab"]
            same = (
                info["name"] == lab.name
                and info["kind"] == lab.kind.value
                and float(info["time_scale"]) == float(lab.time_scale)
            )
            scenarios = result["scenarios"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not same or not isinstance(scenarios, list):
            continue
        read += 1
        for s in scenarios:
            if not isinstance(s, dict) or s.get("verdict") not in _MEASURED:
                continue
            sid = s.get("id")
            if isinstance(sid, str) and sid not in durations and (wall := _seconds(s)):
                durations[sid] = wall
    return durations, read


def longest_first(todo: list[LoadedScenario], reports_root: Path, inventory: Inventory) -> Order:
    """`todo` as the workers should take it: the scenarios of unknown length first (in order),
    then the others by their last wall time, longest first (ties in order)."""
    durations, read = last_durations(reports_root, inventory)
    unknown = [ls for ls in todo if ls.scenario.metadata.id not in durations]
    known = [ls for ls in todo if ls.scenario.metadata.id in durations]
    known.sort(key=lambda ls: -durations[ls.scenario.metadata.id])  # stable: ties keep order
    return Order(scenarios=unknown + known, known=len(known), runs_read=read)
