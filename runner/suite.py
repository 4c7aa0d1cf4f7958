"""A run of several scenarios on one lab: pick what applies, make sure the lab is up and clean,
run each scenario, write the reports."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner import __version__, journal
from runner.errors import LeftoversError
from runner.inventory import Inventory
from runner.labs import LabDriver, open_lab
from runner.report import write_reports
from runner.results import LabInfo, RunResult, ScenarioResult, Verdict, combine
from runner.run import Progress, run_scenario
from runner.scenario import LoadedScenario


@dataclass(frozen=True)
class SuiteOutcome:
    result: RunResult
    report_dir: Path


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def skipped(ls: LoadedScenario, lab: LabDriver) -> ScenarioResult:
    now = datetime.now(UTC)
    kinds = ", ".join(k.value for k in ls.scenario.labs)
    return ScenarioResult(
        id=ls.scenario.metadata.id,
        title=ls.scenario.metadata.title,
        file=str(ls.path),
        lab=lab.inventory.lab.name,
        verdict=Verdict.SKIPPED,
        time_to_fail_s=None,
        time_to_recover_s=None,
        started_at=now,
        finished_at=now,
        assertions=[],
        timeline=[],
        evidence=[],
        notes=[f"applies to {kinds}, not to a {lab.kind.value} lab"],
    )


def run_suite(
    scenarios: list[LoadedScenario],
    inventory: Inventory,
    reports_root: Path,
    progress: Progress,
    *,
    bring_up: bool = True,
) -> SuiteOutcome:
    lab = open_lab(inventory)
    leftovers = journal.open_changes(lab.state_dir)
    if leftovers:
        raise LeftoversError(
            f"lab {inventory.lab.name!r} has {len(leftovers)} change(s) left by an interrupted "
            f"run (journal {leftovers[0].journal})",
            hint=f"gameday cleanup --lab {inventory.path}",
        )
    started_here = False
    if not lab.is_up():
        if not bring_up:
            lab.up()  # raises LabNotUp-style errors with a hint
        progress(f"bringing up lab {inventory.lab.name!r}")
        lab.up()
        started_here = True
    run_id = new_run_id()
    report_dir = reports_root / run_id
    lab.artifacts_dir = report_dir / "ansible"  # host actions' Ansible events
    jr = journal.Journal(lab.state_dir, run_id)
    started = datetime.now(UTC)
    results: list[ScenarioResult] = []
    try:
        for ls in scenarios:
            if lab.kind not in ls.scenario.labs:
                results.append(skipped(ls, lab))
                continue
            progress(f"[{ls.scenario.metadata.id}] starting")
            sid = ls.scenario.metadata.id

            def scoped(message: str, sid: str = sid) -> None:
                progress(f"[{sid}] {message}")

            results.append(run_scenario(ls, lab, jr, scoped))
            progress(f"[{ls.scenario.metadata.id}] {results[-1].verdict.value}")
    finally:
        if not journal.open_changes(lab.state_dir):
            jr.close()
        if started_here:
            progress(f"taking lab {inventory.lab.name!r} down")
            lab.down()
    spec = inventory.lab
    result = RunResult(
        run_id=run_id,
        gameday_version=__version__,
        started_at=started,
        finished_at=datetime.now(UTC),
        lab=LabInfo(
            name=spec.name,
            kind=spec.kind.value,
            inventory=str(inventory.path),
            time_scale=spec.time_scale,
            timing_allowance_s=spec.timing_allowance_s,
        ),
        verdict=combine([r.verdict for r in results]),
        scenarios=results,
    )
    write_reports(result, report_dir)
    return SuiteOutcome(result, report_dir)
