"""A run of several scenarios on one lab: pick what applies, make sure the lab is up and clean,
run each scenario, write the reports."""

from __future__ import annotations

import contextlib
import secrets
import threading
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from runner import __version__
from runner.errors import GamedayError, LeftoversError
from runner.labs import open_lab, wait_all_ready
from runner.labs.base import LabDriver
from runner.labs.capabilities import lacking
from runner.labs.common.adoption import redeployed_error
from runner.labs.common.alertmanager_config import receiver_token
from runner.labs.registry import entry
from runner.report import write_reports
from runner.results.repopaths import repository_root, shown
from runner.results.rundirs import link_latest
from runner.results.schema import (
    Assertion,
    Interruption,
    LabInfo,
    Phase,
    RunResult,
    ScenarioResult,
    Verdict,
    combine,
)
from runner.run import Progress, journal, run_scenario, shielded_from_sigint
from runner.run.capacity import overload
from runner.run.interrupt import Interrupted, ScenarioInterrupted, interruption
from runner.run.lease import LeaseKeeper
from runner.run.parallel import check_parallel, instance, run_workers
from runner.run.receiver import held
from runner.run.schedule import longest_first
from runner.spec.checks import check_engine_names
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import check_scenario
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import TimeScale

FAIL_FAST_NOTE = "not run: --fail-fast"


@dataclass(frozen=True)
class SuiteOutcome:
    result: RunResult
    report_dir: Path


class RunInterrupted(Interrupted):
    """Ctrl-C or SIGTERM stopped the run; its report, of what ran, is written (`outcome`)."""

    def __init__(self, outcome: SuiteOutcome, how: Interruption) -> None:
        super().__init__(how)
        self.outcome = outcome


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
        file=shown(ls.path, repository_root()),
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
    fail_fast: bool = False,
) -> SuiteOutcome:
    """Run the scenarios that apply to the lab, on `parallel` isolated instances of it (one:
    in this thread, in order), and write one report. With `fail_fast`, the first scenario that
    fails or errs stops the run: those not started yet are skipped ("not run: --fail-fast")."""
    labs = _open_labs(scenarios, inventory, parallel)
    run_id = new_run_id()
    report_dir = reports_root / run_id
    started = datetime.now(UTC)
    todo = [ls for ls in scenarios if applies(ls, labs[0])]
    workers = max(1, min(parallel, len(todo)))  # no lab instance without a scenario for it
    suite = _Suite(labs, run_id, report_dir, progress, tagged=parallel > 1, fail_fast=fail_fast)
    order = todo
    if workers > 1:
        taken = longest_first(todo, reports_root, inventory)
        progress(f"--parallel {workers}: {taken.sentence()}")
        order = taken.scenarios
    try:
        suite.run(order, workers)
    except KeyboardInterrupt as exc:
        # the report of what ran: the scenario under way is an error, those not started skipped
        how = interruption(exc)
        with shielded_from_sigint():  # a second signal must not cut the report short
            outcome = _report(suite, scenarios, todo, labs[0], inventory, started, workers, how)
            link_latest(reports_root, report_dir)
        raise RunInterrupted(outcome, how) from exc
    outcome = _report(suite, scenarios, todo, labs[0], inventory, started, workers, None)
    link_latest(reports_root, report_dir)
    return outcome


def _report(
    suite: _Suite,
    scenarios: list[LoadedScenario],
    todo: list[LoadedScenario],
    lab: LabDriver,
    inventory: Inventory,
    started: datetime,
    workers: int,
    interrupted: Interruption | None,
) -> SuiteOutcome:
    """Write the run's reports from the results its scenarios reached."""
    results = []
    for ls in scenarios:
        if (r := suite.finished.get(id(ls))) is not None:
            results.append(r)
        elif any(ls is t for t in todo) and interrupted is not None:
            note = f"not run: interrupted by {interrupted.value}"
            results.append(_unrun(ls, lab, Verdict.SKIPPED, datetime.now(UTC), [], [note]))
        else:
            results.append(skipped(ls, lab))
    if over := overload(inventory, workers):
        # the verdicts' reader learns the machine was asked for more than it holds
        results = [r.model_copy(update={"notes": [*r.notes, over.sentence()]}) for r in results]
    result = _run_result(suite.run_id, inventory, started, workers, results, interrupted)
    return SuiteOutcome(write_reports(result, suite.report_dir), suite.report_dir)


def _open_labs(
    scenarios: list[LoadedScenario], inventory: Inventory, parallel: int
) -> list[LabDriver]:
    """The lab's `parallel` instances, once the scenarios fit the lab and no instance has
    changes an interrupted run left."""
    check_parallel(inventory, parallel)
    for ls in scenarios:
        if inventory.lab.kind in ls.scenario.labs:
            check_scenario(ls, inventory)
            check_engine_names(ls, inventory)
    labs = [open_lab(instance(inventory, k)) for k in range(parallel)]
    for lab in labs:
        # a user-written step's undo (or baseline re-apply) left open counts as a change
        leftovers: list[journal.OpenChange | journal.OpenStep] = [
            *journal.open_changes(lab.state_dir),
            *journal.open_steps(lab.state_dir),
        ]
        if leftovers:
            raise LeftoversError(
                f"lab {lab.inventory.lab.name!r} has {len(leftovers)} change(s) left by an "
                f"interrupted run (journal {leftovers[0].journal})",
                hint=f"gameday cleanup --lab {inventory.path}"
                + (f" --parallel {parallel}" if parallel > 1 else ""),
            )
        adopted = lab.inventory.lab.adopt is not None
        if adopted and (nodes := lab.redeployed()):  # its saved baseline is older than what runs
            raise redeployed_error(
                f"lab {lab.inventory.lab.name!r}", nodes, str(lab.inventory.path)
            )
    return labs


class _Suite:
    """One suite run's lab instances (k: which), each with its journal; `tagged`: progress
    messages name the instance."""

    def __init__(
        self,
        labs: list[LabDriver],
        run_id: str,
        report_dir: Path,
        progress: Progress,
        *,
        tagged: bool,
        fail_fast: bool = False,
    ) -> None:
        self.labs = labs
        self.run_id = run_id
        self.report_dir = report_dir
        self.progress = progress
        self.tagged = tagged
        self.fail_fast = fail_fast
        self.stopped = threading.Event()  # set by the first failure under fail_fast
        self.finished: dict[int, ScenarioResult] = {}  # by id() of the scenario, as each ends
        self.journals: dict[int, journal.Journal] = {}
        self.started_here: set[int] = set()
        self.receivers: dict[int, contextlib.ExitStack] = {}  # each instance's, while it runs
        self.leases: dict[int, LeaseKeeper] = {}  # an adopted deployment's, while it runs
        self.receive = False  # some scenario asks for an alert's delivery

    def run(self, todo: list[LoadedScenario], workers: int) -> list[ScenarioResult]:
        """The scenarios' results, in order."""
        self.receive = any(a.delivered for ls in todo for a in ls.scenario.detect.alerts)
        if workers == 1:
            try:
                self.setup(0)
                return [self.work(0, ls) for ls in todo]
            finally:
                self.teardown(0)
        ran, errors = run_workers(todo, workers, self.work, self.setup, self.teardown)
        if errors:
            raise errors[0]
        return ran

    def setup(self, k: int) -> None:
        lab = self.labs[k]
        self.receivers[k] = self._receiver(lab)
        if not lab.is_up():
            self.progress(f"bringing up lab {lab.inventory.lab.name!r}")
            lab.up()
            self.started_here.add(k)
            # every node serving; Prometheus's first scrape is waited for only by the scenarios
            # that use it (its discovery takes 5 s of wall time whatever the scale)
            spec = lab.inventory.lab
            wait_all_ready(lab, TimeScale.of(spec).boot_timeout_lab(spec))
        lab.artifacts_dir = self.report_dir / "ansible"  # host actions' Ansible events
        self.journals[k] = journal.Journal(lab.state_dir, self.run_id)
        self.leases[k] = LeaseKeeper(lab)

    def work(self, k: int, ls: LoadedScenario) -> ScenarioResult:
        sid = ls.scenario.metadata.id
        if self.stopped.is_set():
            self.finished[id(ls)] = _unrun(
                ls, self.labs[k], Verdict.SKIPPED, datetime.now(UTC), [], [FAIL_FAST_NOTE]
            )
            return self.finished[id(ls)]
        tag = f"{sid}@{self.labs[k].inventory.lab.name}" if self.tagged else sid

        def scoped(message: str) -> None:
            self.progress(f"[{tag}] {message}")

        scoped("starting")
        started_at = datetime.now(UTC)
        try:
            result = run_scenario(ls, self.labs[k], self.journals[k], scoped)
        except ScenarioInterrupted as exc:  # its result so far goes in the report
            self.finished[id(ls)] = exc.result
            raise
        except Exception as exc:  # an error in one scenario is its verdict, not the suite's end
            result = errored(ls, self.labs[k], started_at, exc)
        self.finished[id(ls)] = result
        scoped(result.verdict.value)
        if self.fail_fast and result.verdict in (Verdict.FAILED, Verdict.ERROR):
            self.stopped.set()
        return result

    def _receiver(self, lab: LabDriver) -> contextlib.ExitStack:
        """The instance's alert receiver, listening from before its lab comes up until its
        teardown, when a scenario asks for a delivery: what Alertmanager delivers between
        scenarios (the boot's alerts, a resolution after a scenario ended) is taken, and
        Alertmanager's notification log stays true (see runner/run/receiver.py)."""
        stack = contextlib.ExitStack()
        spec = lab.inventory.lab
        if self.receive and spec.monitoring is not None:
            host, port = entry(spec.kind).receiver_listen(lab.inventory)
            # one that cannot listen is reported by each scenario that needs it
            with contextlib.suppress(GamedayError):
                # a lab this run brings up gets its token now, which its `lab up` then writes
                token = receiver_token(lab.state_dir, create=not lab.is_up())
                stack.enter_context(held(host, port, spec.name, token))
        return stack

    def teardown(self, k: int) -> None:
        lab = self.labs[k]
        if k in self.receivers:
            self.receivers.pop(k).close()
        if k in self.leases:
            self.leases.pop(k).stop()
        if k in self.journals and not journal.open_changes(lab.state_dir):
            self.journals[k].close()
        if k in self.started_here:
            self.progress(f"taking lab {lab.inventory.lab.name!r} down")
            lab.down()


def _run_result(
    run_id: str,
    inventory: Inventory,
    started: datetime,
    workers: int,
    results: list[ScenarioResult],
    interrupted: Interruption | None = None,
) -> RunResult:
    spec = inventory.lab
    return RunResult(
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
        interrupted=interrupted,
    )
