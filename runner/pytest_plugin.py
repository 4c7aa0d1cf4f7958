"""pytest plugin: `pytest scenarios/ --lab inventories/local.yaml` collects every scenario file as
a test and runs it on the lab. A failed scenario shows each failed assertion, expected vs
observed. Registered through the `pytest11` entry point; inert unless --lab is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.errors import GamedayError, LeftoversError
from runner.labs import open_lab
from runner.labs.base import LabDriver
from runner.labs.capabilities import lacking
from runner.results.schema import ScenarioResult, Verdict
from runner.run import journal, run_scenario
from runner.run.lease import LeaseKeeper
from runner.run.suite import new_run_id
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory
from runner.spec.scenario import LoadedScenario, load_scenario

_LAB_KEY = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gameday")
    group.addoption(
        "--lab",
        dest="gameday_lab",
        default=None,
        help="gameday: run scenario files as tests on the lab of this inventory",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LAB_KEY] = {}


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    if parent.config.getoption("gameday_lab") is None:
        return None
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    try:
        head = file_path.read_text(encoding="utf-8", errors="replace")[:2000]
    except OSError:
        return None
    if "apiVersion: gameday/" not in head:
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


class ScenarioFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        ls = load_scenario(self.path)
        yield ScenarioItem.from_parent(self, name=ls.scenario.metadata.id, loaded=ls)


class ScenarioFailed(Exception):
    def __init__(self, result: ScenarioResult) -> None:
        super().__init__(result.id)
        self.result = result


class ScenarioItem(pytest.Item):
    def __init__(self, *, loaded: LoadedScenario, **kw: Any) -> None:
        super().__init__(**kw)
        self.loaded = loaded

    def runtest(self) -> None:
        state = _session_lab(self.config)
        lab: LabDriver = state["lab"]
        if lab.kind not in self.loaded.scenario.labs:
            pytest.skip(f"does not apply to a {lab.kind.value} lab")
        if reasons := lacking(self.loaded.scenario, lab):
            pytest.skip("; ".join(reasons))
        result = run_scenario(self.loaded, lab, state["journal"], lambda _m: None)
        if result.verdict is not Verdict.PASSED:
            raise ScenarioFailed(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            r = excinfo.value.result
            lines = [f"scenario {r.id} {r.verdict.value} on lab {r.lab}"]
            for a in r.assertions:
                if a.verdict in (Verdict.FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE):
                    lines += [
                        f"{a.verdict.value.upper()}: {a.name}",
                        f"    expected: {a.expected}",
                        f"    observed: {a.observed}",
                    ]
            return "\n".join(lines)
        if isinstance(excinfo.value, GamedayError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"scenario {self.name}"


def _session_lab(config: pytest.Config) -> dict[str, Any]:
    state = config.stash[_LAB_KEY]
    if "lab" not in state:
        inventory: Inventory = load_inventory(Path(config.getoption("gameday_lab")))
        lab = open_lab(inventory)
        left = [*journal.open_changes(lab.state_dir), *journal.open_steps(lab.state_dir)]
        if left:
            raise LeftoversError(
                f"lab {inventory.lab.name!r} has changes left by an interrupted run",
                hint=f"gameday cleanup --lab {inventory.path}",
            )
        state["started_here"] = not lab.is_up()
        lab.up()
        state["lab"] = lab
        state["journal"] = journal.Journal(lab.state_dir, new_run_id())
        state["lease"] = LeaseKeeper(lab)
    return state


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_LAB_KEY, {})
    if "lab" in state:
        state["lease"].stop()
        state["journal"].close()
        if state.get("started_here"):
            state["lab"].down()
