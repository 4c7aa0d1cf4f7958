"""A run of several scenarios on one lab: pick what applies, make sure the lab is up and clean,
run each scenario, write the reports."""

from __future__ import annotations

import secrets
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner import __version__, journal
from runner.errors import LeftoversError
from runner.inventory import Inventory, check_scenario
from runner.labs import LabDriver, open_lab, wait_all_ready
from runner.labs.capabilities import lacking
from runner.parallel import check_parallel, instance, run_workers
from runner.report import write_reports
from runner.results import Assertion, LabInfo, Phase, RunResult, ScenarioResult, Verdict, combine
from runner.run import Progress, run_scenario
from runner.scenario import LoadedScenario
from runner.timing import TimeScale


@dataclass(frozen=True)
class SuiteOutcome:
    result: RunResult
    report_dir: Path


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def _unrun(
    ls: LoadedScenario,
    lab: LabDriver,
    verdict: Verdict,
    started_at: datetime,
    assertions: list[Assertion],
    notes: list[str],
) -> ScenarioResult:
    """The result of a scenario that has no run of its own to report."""
    return ScenarioResult(
        id=ls.scenario.metadata.id,
        title=ls.scenario.metadata.title,
        file=str(ls.path),
        lab=lab.inventory.lab.name,
        verdict=verdict,
        time_to_fail_s=None,
        time_to_recover_s=None,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        assertions=assertions,
        timeline=[],
        evidence=[],
        notes=notes,
    )


def applies(ls: LoadedScenario, lab: LabDriver) -> bool:
    return lab.kind in ls.scenario.labs and not lacking(ls.scenario, lab)


def skipped(ls: LoadedScenario, lab: LabDriver) -> ScenarioResult:
    if lab.kind in ls.scenario.labs:
        notes = lacking(ls.scenario, lab)
    else:
        kinds = ", ".join(k.value for k in ls.scenario.labs)
        notes = [f"applies to {kinds}, not to a {lab.kind.value} lab"]
    if why := ls.scenario.lab_notes.get(lab.kind):
        notes.append(f"why: {why}")
    return _unrun(ls, lab, Verdict.SKIPPED, datetime.now(UTC), [], notes)


def errored(
    ls: LoadedScenario, lab: LabDriver, started_at: datetime, exc: Exception
) -> ScenarioResult:
    """The result of a scenario whose run raised: verdict `error`, with the exception's message
    and where it came from."""
    failed = Assertion(
        name="lab",
        phase=Phase.RUN,
        verdict=Verdict.ERROR,
        expected="the lab carries out the scenario",
        observed=f"{type(exc).__name__}: {exc}",
        detail="".join(traceback.format_exception(exc)),
    )
    return _unrun(ls, lab, Verdict.ERROR, started_at, [failed], [])


def run_suite(
    scenarios: list[LoadedScenario],
    inventory: Inventory,
    reports_root: Path,
    progress: Progress,
    *,
    parallel: int = 1,
) -> SuiteOutcome:
    """Run the scenarios that apply to the lab, on `parallel` isolated instances of it (one:
    in this thread, in order), and write one report."""
    check_parallel(inventory, parallel)
    for ls in scenarios:
        if inventory.lab.kind in ls.scenario.labs:
            check_scenario(ls, inventory)
    labs = [open_lab(instance(inventory, k)) for k in range(parallel)]
    for lab in labs:
        leftovers = journal.open_changes(lab.state_dir)
        if leftovers:
            raise LeftoversError(
                f"lab {lab.inventory.lab.name!r} has {len(leftovers)} change(s) left by an "
                f"interrupted run (journal {leftovers[0].journal})",
                hint=f"gameday cleanup --lab {inventory.path}"
                + (f" --parallel {parallel}" if parallel > 1 else ""),
            )
    run_id = new_run_id()
    report_dir = reports_root / run_id
    started = datetime.now(UTC)
    todo = [ls for ls in scenarios if applies(ls, labs[0])]
    journals: dict[int, journal.Journal] = {}
    started_here: set[int] = set()

    def setup(k: int) -> None:
        lab = labs[k]
        if not lab.is_up():
            progress(f"bringing up lab {lab.inventory.lab.name!r}")
            lab.up()
            started_here.add(k)
            # every node serving; Prometheus's first scrape is waited for only by the scenarios
            # that use it (its discovery takes 5 s of wall time whatever the scale)
            spec = lab.inventory.lab
            wait_all_ready(lab, TimeScale.of(spec).boot_timeout_lab(spec))
        lab.artifacts_dir = report_dir / "ansible"  # host actions' Ansible events
        journals[k] = journal.Journal(lab.state_dir, run_id)

    def work(k: int, ls: LoadedScenario) -> ScenarioResult:
        sid = ls.scenario.metadata.id
        tag = f"{sid}@{labs[k].inventory.lab.name}" if parallel > 1 else sid

        def scoped(message: str) -> None:
            progress(f"[{tag}] {message}")

        scoped("starting")
        started_at = datetime.now(UTC)
        try:
            result = run_scenario(ls, labs[k], journals[k], scoped)
        except Exception as exc:  # an error in one scenario is its verdict, not the suite's end
            result = errored(ls, labs[k], started_at, exc)
        scoped(result.verdict.value)
        return result

    def teardown(k: int) -> None:
        lab = labs[k]
        if k in journals and not journal.open_changes(lab.state_dir):
            journals[k].close()
        if k in started_here:
            progress(f"taking lab {lab.inventory.lab.name!r} down")
            lab.down()

    workers = max(1, min(parallel, len(todo)))  # no lab instance without a scenario for it
    if workers == 1:
        try:
            setup(0)
            ran = [work(0, ls) for ls in todo]
        finally:
            teardown(0)
    else:
        ran, errors = run_workers(todo, workers, work, setup, teardown)
        if errors:
            raise errors[0]
    by_id = {id(ls): r for ls, r in zip(todo, ran, strict=True)}
    results = [by_id[id(ls)] if id(ls) in by_id else skipped(ls, labs[0]) for ls in scenarios]
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
            instances=workers,
        ),
        verdict=combine([r.verdict for r in results]),
        scenarios=results,
    )
    write_reports(result, report_dir)
    return SuiteOutcome(result, report_dir)
