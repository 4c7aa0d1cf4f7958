"""runner.run.schedule: `run --parallel`'s workers take the longest scenarios first, by their
wall time in the latest runs of the same lab; unknown ones first; reports that cannot be read
leave the files' order."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from runner.report import write_reports
from runner.results.schema import LabInfo, Verdict
from runner.run.schedule import longest_first
from runner.spec.inventory_load import load_inventory
from runner.spec.scenario import LoadedScenario, load_scenario
from tests.support.fakelab import scenario_doc
from tests.support.results import NOW, run_result, scenario_result

ROOT = Path(__file__).resolve().parents[4]
LOCAL = ROOT / "inventories" / "local.yaml"
IDS = ("a-short", "b-long", "c-middle", "d-new")


@pytest.fixture
def todo(tmp_path: Path) -> list[LoadedScenario]:
    out = []
    for sid in IDS:
        p = tmp_path / f"{sid}.yaml"
        p.write_text(yaml.safe_dump(scenario_doc(metadata={"id": sid, "title": sid})))
        out.append(load_scenario(p))
    return out


def ran(reports: Path, run_id: str, walls: dict[str, float], **lab: object) -> None:
    info = {"name": "local", "kind": "local", "inventory": "i", "time_scale": 100.0}
    info |= {"timing_allowance_s": 0.1} | lab
    scenarios = [
        scenario_result(
            id=sid,
            verdict=Verdict.PASSED if wall >= 0 else Verdict.ERROR,
            started_at=NOW,
            finished_at=NOW + timedelta(seconds=abs(wall)),
        )
        for sid, wall in walls.items()
    ]
    write_reports(run_result(*scenarios, run_id=run_id, lab=LabInfo(**info)), reports / run_id)


def ids(order: list[LoadedScenario]) -> list[str]:
    return [ls.scenario.metadata.id for ls in order]


def test_longest_first_unknown_ones_before_them(todo: list[LoadedScenario], tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    ran(reports, "20261201T000000Z-aaaaaa", {"a-short": 3.0, "b-long": 15.0, "c-middle": 8.0})
    order = longest_first(todo, reports, load_inventory(LOCAL))
    assert ids(order.scenarios) == ["d-new", "b-long", "c-middle", "a-short"]
    assert order.known == 3
    assert "3 of 4 known, the others first" in order.sentence()


def test_the_newest_run_of_the_same_lab_counts(todo: list[LoadedScenario], tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    ran(reports, "20261201T000000Z-aaaaaa", {"a-short": 3.0, "b-long": 15.0})
    ran(reports, "20261202T000000Z-bbbbbb", {"a-short": 30.0})  # a-short grew
    ran(reports, "20261203T000000Z-cccccc", {"b-long": 99.0}, name="compose", kind="compose")
    ran(reports, "20261204T000000Z-dddddd", {"c-middle": 99.0}, time_scale=10.0)
    ran(reports, "20261205T000000Z-eeeeee", {"b-long": -1.0})  # an error says nothing of length
    order = longest_first(
        todo, load_inventory(LOCAL).path.parent.parent / "x", load_inventory(LOCAL)
    )
    assert ids(order.scenarios) == list(IDS)  # no reports there: the files' order
    order = longest_first(todo, reports, load_inventory(LOCAL))
    assert ids(order.scenarios) == ["c-middle", "d-new", "a-short", "b-long"]
    assert order.runs_read == 3  # this lab's at this scale; not compose's, not x10's


def test_a_broken_reports_folder_leaves_the_files_order(
    todo: list[LoadedScenario], tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    (reports / "20261201T000000Z-aaaaaa").mkdir(parents=True)
    (reports / "20261201T000000Z-aaaaaa" / "result.json").write_text("{not json")
    (reports / "20261202T000000Z-bbbbbb").mkdir()
    (reports / "20261202T000000Z-bbbbbb" / "result.json").write_text('{"lab": 3}')
    order = longest_first(todo, reports, load_inventory(LOCAL))
    assert ids(order.scenarios) == list(IDS)
    assert order.known == 0
    assert "files' order" in order.sentence()
