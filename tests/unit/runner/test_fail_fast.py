"""`run --fail-fast`: the suite stops at the first scenario that fails; those not started are
skipped with a note. On the fake lab, with real scenario runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from runner.labs.fake import FakeLab
from runner.results.schema import ScenarioResult, Verdict
from runner.run import suite
from runner.spec.scenario import LoadedScenario, load_scenario
from tests.support.fakelab import inventory, scenario_doc, wrong_flag


def scenario(tmp_path: Path, sid: str, exit_code: int) -> LoadedScenario:
    doc = scenario_doc(metadata={"id": sid, "title": sid})
    doc["expect"]["exit_code"] = exit_code  # the fake engine exits 1: 2 is a failed assertion
    p = tmp_path / f"{sid}.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_scenario(p)


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_fast: bool) -> list[ScenarioResult]:
    lab = FakeLab(inventory(tmp_path), wrong_flag(), state_dir=tmp_path / "state")
    lab.up()
    real = suite.run_scenario

    def on_fake(ls: LoadedScenario, lab: Any, journal: Any, progress: Any) -> ScenarioResult:
        http = httpx.Client(transport=lab.transport)
        return real(ls, lab, journal, progress, http=http)

    monkeypatch.setattr(suite, "run_scenario", on_fake)
    todo = [
        scenario(tmp_path, "first-passes", 1),
        scenario(tmp_path, "second-fails", 2),
        scenario(tmp_path, "third-passes", 1),
    ]
    runner = suite._Suite(
        [lab], "run-1", tmp_path / "report", lambda _m: None, tagged=False, fail_fast=fail_fast
    )
    return runner.run(todo, 1)


def test_fail_fast_skips_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = run(tmp_path, monkeypatch, fail_fast=True)
    assert [(r.id, r.verdict) for r in results] == [
        ("first-passes", Verdict.PASSED),
        ("second-fails", Verdict.FAILED),
        ("third-passes", Verdict.SKIPPED),
    ]
    assert results[2].notes == ["not run: --fail-fast"]
    assert results[2].assertions == []


def test_without_fail_fast_every_scenario_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = run(tmp_path, monkeypatch, fail_fast=False)
    assert [r.verdict for r in results] == [Verdict.PASSED, Verdict.FAILED, Verdict.PASSED]
