"""A part of the lab's monitoring that dies ends the phase that waits on it, and the step's
record names it (`died`): at baseline, while Prometheus's first scrape is awaited, and at detect,
while an alert is awaited that a dead Prometheus will never fire."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner.labs.base import PartDeath, PartDied
from runner.results.schema import Phase, Verdict
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag

DEATH = PartDeath(part="Prometheus", exit_code=1, last_lines=("err: lock DB directory",))


def _alerting(doc: dict[str, object]) -> dict[str, object]:
    doc["detect"] = {"alerts": [{"name": "ServingDown", "within_s": 86400}]}
    return doc


def test_a_prometheus_that_died_before_its_first_scrape_is_the_baselines_error(
    tmp_path: Path,
) -> None:
    run = fake_run(tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=list)

    def died(timeout_s: float) -> None:
        raise PartDied(DEATH)

    run.lab.monitoring_ready = died  # type: ignore[method-assign]
    result = run.run()
    assert result.verdict is Verdict.ERROR
    [a] = [a for a in result.assertions if a.verdict is Verdict.ERROR]
    assert (a.phase, a.name, a.died) == (Phase.BASELINE, "baseline: Prometheus scraping", DEATH)
    assert (
        a.observed == "Prometheus died: exited with status 1; its last line: err: lock DB directory"
    )


def test_a_part_that_dies_while_an_alert_is_awaited_ends_the_wait(tmp_path: Path) -> None:
    # a window of 86 lab seconds (x1000): the death, not the window, must end the wait
    run = fake_run(tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=list)
    looks: list[float] = []

    def dead_part() -> PartDeath | None:
        looks.append(time.monotonic())
        return DEATH if len(looks) > 1 else None

    run.lab.dead_part = dead_part  # type: ignore[method-assign]
    t0 = time.monotonic()
    result = run.run()
    assert time.monotonic() - t0 < 30
    detect = next(a for a in result.assertions if a.phase is Phase.DETECT)
    assert (detect.verdict, detect.died) == (Verdict.ERROR, DEATH)
    assert detect.observed == DEATH.summary()


def test_prometheus_is_awaited_after_the_baseline_and_before_the_injection(
    tmp_path: Path,
) -> None:
    """Its first scrape takes 5 s of wall time from the lab's start: a scenario whose baseline
    does not read Prometheus waits for it once its baseline holds, just before the injection."""
    run = fake_run(tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=list)

    def awaited(timeout_s: float) -> None:
        run.progress.append("(Prometheus awaited)")
        raise PartDied(DEATH)  # the run ends here: what came before it is the order

    run.lab.monitoring_ready = awaited  # type: ignore[method-assign]
    result = run.run()
    said = [p.split(":")[0] for p in run.progress]
    assert said[: said.index("(Prometheus awaited)")] == ["baseline"]
    assert "inject" not in said
    assert [a.name for a in result.assertions if a.phase is Phase.BASELINE][-1] == (
        "baseline: Prometheus scraping"
    )
    assert any(a.phase is Phase.BASELINE and a.verdict is Verdict.PASSED for a in result.assertions)


def test_a_baseline_that_reads_prometheus_waits_for_it_before_its_probes(tmp_path: Path) -> None:
    doc = _alerting(scenario_doc())
    doc["baseline"]["probes"].append({"kind": "promql", "query": "up", "value": 0})  # type: ignore[index]
    run = fake_run(tmp_path, doc, wrong_flag(), alerts=list)

    def died(timeout_s: float) -> None:
        raise PartDied(DEATH)

    run.lab.monitoring_ready = died  # type: ignore[method-assign]
    result = run.run()
    assert [a.name for a in result.assertions if a.phase is Phase.BASELINE] == [
        "baseline: Prometheus scraping"
    ]  # no probe of the baseline ran before it


def _serving_down(active_at: str) -> dict[str, object]:
    return {
        "labels": {"alertname": "ServingDown", "node": "serving"},
        "state": "firing",
        "activeAt": active_at,
    }


def test_an_alert_active_before_the_injection_is_awaited_until_it_resolves(
    tmp_path: Path,
) -> None:
    """One alert per label set: a ServingDown still active from the lab's boot would stay
    active through the fault and never be this fault's. The baseline waits for it to resolve."""
    looks: list[int] = []

    def alerts() -> list[dict[str, object]]:
        looks.append(1)
        if len(looks) <= 3:  # the boot's, resolving at a later evaluation
            return [_serving_down("2026-01-01T00:00:00Z")]
        if len(looks) == 4:
            return []
        return [_serving_down(datetime.now(UTC).isoformat())]  # the fault's own

    run = fake_run(tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=alerts)
    result = run.run()
    assert len(looks) > 3
    said = [p.split(":")[0] for p in run.progress]
    assert "inject" in said
    assert not any(a.name == "baseline: the scenario's alerts are quiet" for a in result.assertions)
    detect = next(a for a in result.assertions if a.name == "detect: alert ServingDown fires")
    assert detect.verdict is Verdict.PASSED


def test_an_alert_that_stays_active_before_the_injection_is_the_baselines_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runner.run.phases.baseline.ALERTS_QUIET_S", 0.2)
    run = fake_run(
        tmp_path,
        _alerting(scenario_doc()),
        wrong_flag(),
        alerts=lambda: [_serving_down("2026-01-01T00:00:00Z")],
    )
    result = run.run()
    assert result.verdict is Verdict.ERROR
    [a] = [a for a in result.assertions if a.verdict is Verdict.ERROR]
    assert (a.phase, a.name) == (Phase.BASELINE, "baseline: the scenario's alerts are quiet")
    assert a.observed == (
        "ServingDown firing since 2026-01-01T00:00:00Z (node=serving), still after 0.2 s"
    )
    assert "inject" not in [p.split(":")[0] for p in run.progress]
