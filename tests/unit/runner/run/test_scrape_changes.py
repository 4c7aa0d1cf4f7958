"""A step that changes what Prometheus scrapes has taken effect once Prometheus scrapes the new
targets: a recovery step waits for that, and so does its rollback (that time is the recovery's);
cleanup's undo does not (a later scenario that uses Prometheus waits for its scrape before its
injection)."""

from __future__ import annotations

from pathlib import Path

from runner.results.schema import Verdict
from tests.support.fakelab import FakeRun, fake_run, scenario_doc, wrong_flag

SCRAPE_OVERLAY = {"kind": "scrape_targets", "job": "node-exporter", "network": "overlay"}


def _calls(run: FakeRun) -> list[str]:
    """What the run asks of the lab, in order, Prometheus's scrape waits among them."""
    calls: list[str] = []
    run.lab.on_call = calls.append

    def ready(timeout_s: float) -> None:
        calls.append("monitoring_ready")

    run.lab.monitoring_ready = ready  # type: ignore[method-assign]
    return calls


def _scrapes(calls: list[str]) -> list[int]:
    return [i for i, c in enumerate(calls) if c == "apply scrape_targets"]


def test_a_recovery_step_and_its_rollback_wait_for_the_scrape(tmp_path: Path) -> None:
    doc = scenario_doc(
        recover=[
            {
                "name": "Scrape the overlay addresses, then roll back",
                "outcome": "restores",
                "actions": [SCRAPE_OVERLAY, {"kind": "rollback"}],
            }
        ]
    )
    run = fake_run(tmp_path, doc, wrong_flag())
    calls = _calls(run)
    result = run.run()
    assert result.verdict is Verdict.PASSED, [a.observed for a in result.assertions]
    scrapes = _scrapes(calls)
    assert len(scrapes) == 2  # the step's, then the rollback's undo
    assert "monitoring_ready" in calls[scrapes[0] + 1 : scrapes[1]]
    assert "monitoring_ready" in calls[scrapes[1] + 1 :]
    events = [e.event for e in result.timeline]
    assert len([e for e in events if e.startswith("configuration reloaded")]) == 2


def test_cleanups_undo_of_a_scrape_change_is_not_waited_for(tmp_path: Path) -> None:
    doc = scenario_doc(
        recover=[
            {
                "name": "The right length, and scrape the overlay addresses",
                "outcome": "restores",
                "actions": [
                    {"kind": "set_args", "node": "serving", "args": {"--max-model-len": 4096}},
                    SCRAPE_OVERLAY,
                ],
            }
        ]
    )
    run = fake_run(tmp_path, doc, wrong_flag())
    calls = _calls(run)
    result = run.run()
    assert result.verdict is Verdict.PASSED, [a.observed for a in result.assertions]
    step, undo = _scrapes(calls)
    assert "monitoring_ready" in calls[step + 1 : undo]
    assert "monitoring_ready" not in calls[undo + 1 :]
    events = [e.event for e in result.timeline]
    assert any(
        "cleanup: restore lab: node-exporter scrape network for overlay -> management" in e
        for e in events
    )
