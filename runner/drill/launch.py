"""A drill as a command runs it: the lab checked and brought up as for a run (runner.run.suite), its
journal, the drill, and its reports with `mode: drill` (`seat` on a workshop's seat)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.drill.session import Drill, DrillOptions
from runner.errors import InputError
from runner.labs import wait_all_ready
from runner.report import write_reports
from runner.results.rundirs import link_latest
from runner.results.schema import RunMode
from runner.run import journal
from runner.run.context import Progress, utcnow
from runner.run.journal import Journal
from runner.run.lease import LeaseKeeper
from runner.run.suite import SuiteOutcome, _open_labs, _run_result, applies, new_run_id, skipped
from runner.spec.inventory import Inventory
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import TimeScale


def run_drill(
    ls: LoadedScenario,
    inventory: Inventory,
    reports_root: Path,
    progress: Progress,
    *,
    options: DrillOptions | None = None,
    on_start: Callable[[Drill], None] = lambda _d: None,
) -> SuiteOutcome:
    """A drill on the lab, as `run_suite` runs a scenario (the same checks of the lab, its
    bring-up if down, its journal), and its reports with `mode: drill` (`seat` when
    `options.seat` names a workshop's seat). `on_start`: called with the drill before it starts
    (to serve its page)."""
    lab = _open_labs([ls], inventory, 1)[0]
    if not applies(ls, lab):
        why = "; ".join(skipped(ls, lab).notes)
        raise InputError(f"scenario {ls.scenario.metadata.id!r} cannot be drilled here: {why}")
    run_id = new_run_id()
    report_dir = reports_root / run_id
    started = utcnow()
    brought_up = not lab.is_up()
    if brought_up:
        progress(f"bringing up lab {lab.inventory.lab.name!r}")
        lab.up()
        wait_all_ready(lab, TimeScale.of(inventory.lab).boot_timeout_lab(inventory.lab))
    lab.artifacts_dir = report_dir / "ansible"
    j = Journal(lab.state_dir, run_id)
    lease = LeaseKeeper(lab)  # an adopted deployment's, renewed while the drill lasts
    try:
        drill = Drill(ls, lab, j, progress, options=options or DrillOptions())
        on_start(drill)
        res = drill.run()
    finally:
        lease.stop()
        if not journal.open_changes(lab.state_dir):
            j.close()
        if brought_up:
            progress(f"taking lab {lab.inventory.lab.name!r} down")
            lab.down()
    run = _run_result(run_id, inventory, started, 1, [res])
    seat = options is not None and options.seat is not None
    run = run.model_copy(update={"mode": RunMode.SEAT if seat else RunMode.DRILL})
    written = write_reports(run, report_dir)
    link_latest(report_dir.parent, report_dir)
    return SuiteOutcome(written, report_dir)
