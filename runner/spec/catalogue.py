"""The scenarios a command works on: the team's own folders first, then the built-in catalogue
(the scenarios that ship inside the package), and scenario ids wherever paths are accepted.

A team scenario with a catalogue scenario's id overrides it; two team files with one id are an
error (exit 2), as they are in `validate`. A team that leaves the catalogue out of its default set
(`builtin = false` in its configuration) can still name one of its ids.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from runner.errors import ScenarioError
from runner.spec.checks import check_unique_ids
from runner.spec.scenario import LoadedScenario, discover, load_scenario

BUILTIN = "builtin"


def builtin_dir() -> Path:
    """The folder of the built-in catalogue: runner/builtin_scenarios (in a checkout, a link to
    scenarios/)."""
    return Path(str(files("runner") / "builtin_scenarios"))


@dataclass(frozen=True)
class Entry:
    """A scenario and where it came from: `builtin`, or the team's file; `overrides`: it takes
    the place of the catalogue's scenario with its id."""

    loaded: LoadedScenario
    origin: str
    overrides: bool = False


def _load(paths: Sequence[Path]) -> list[LoadedScenario]:
    loaded = [load_scenario(f) for f in discover(list(paths))]
    check_unique_ids(loaded)
    return loaded


def scenario_set(team: Sequence[Path], builtin: bool = True) -> list[Entry]:
    """The team's scenarios (from its folders, in order), then the catalogue's that no team
    scenario overrides (none with `builtin` False). A team file that is itself a catalogue file
    (gameday's own checkout) counts as built-in."""
    catalogue = _load([builtin_dir()])
    real = {ls.path.resolve() for ls in catalogue}
    own = [ls for ls in _load(team) if ls.path.resolve() not in real]
    ids = {ls.scenario.metadata.id for ls in catalogue}
    out = [Entry(ls, str(ls.path), ls.scenario.metadata.id in ids) for ls in own]
    if not builtin:
        return out
    taken = {ls.scenario.metadata.id for ls in own}
    out += [Entry(ls, BUILTIN) for ls in catalogue if ls.scenario.metadata.id not in taken]
    return out


def resolve(args: Sequence[str | Path], team: Sequence[Path], builtin: bool = True) -> list[Entry]:
    """The scenarios the command line names: an existing file or folder is read as such, anything
    else is a scenario id looked up in the team's folders and the catalogue. No arguments: the
    whole set (without the catalogue when `builtin` is False)."""
    if not args:
        return scenario_set(team, builtin)
    out: list[Entry] = []
    known: dict[str, Entry] | None = None
    for arg in args:
        if Path(arg).exists():
            out += [Entry(ls, str(ls.path)) for ls in _load([Path(arg)])]
            continue
        if known is None:
            known = {e.loaded.scenario.metadata.id: e for e in scenario_set(team)}
        sid = str(arg)
        if sid not in known:
            near = difflib.get_close_matches(sid, list(known), n=1)
            raise ScenarioError(
                f"{sid!r} is neither a scenario file nor a scenario id",
                hint=f"did you mean {near[0]!r}?" if near else "`gameday list` shows the ids",
            )
        out.append(known[sid])
    check_unique_ids([e.loaded for e in out])
    return out
