"""A step that changes what Prometheus scrapes has taken effect once Prometheus scrapes the new
targets: a recovery step waits for that (its time is the recovery's), an undo at cleanup does not
(a later scenario that uses Prometheus waits for its scrape before its injection)."""

from __future__ import annotations

from pathlib import Path

from runner.results.schema import Verdict
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag

SCRAPE_OVERLAY = {"kind": "scrape_targets", "job": "node-exporter", "network": "overlay"}


def test_a_recovery_step_waits_for_the_scrape_and_its_undo_does_not(tmp_path: Path) -> None:
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
    calls: list[str] = []
    run.lab.on_call = calls.append

    def ready(timeout_s: float) -> None:
        calls.append("monitoring_ready")

    run.lab.monitoring_ready = ready  # type: ignore[method-assign]
    result = run.run()
    assert result.verdict is Verdict.PASSED, [a.observed for a in result.assertions]
    scrapes = [i for i, c in enumerate(calls) if c == "apply scrape_targets"]
    assert len(scrapes) == 2  # the step's, then the rollback's undo
    applied, undone = scrapes
    assert calls[applied + 1] == "monitoring_ready"
    assert "monitoring_ready" not in calls[undone + 1 :]
    events = [e.event for e in result.timeline]
    assert any(e.startswith("configuration reloaded, every target scraped") for e in events)
    assert any(
        "restore lab: node-exporter scrape network for overlay -> management" in e for e in events
    )
