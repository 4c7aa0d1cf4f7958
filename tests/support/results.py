"""Run results made by hand, for the tests of what reads or writes them (reports, redaction,
escaping). `text` stands in every free-text field unless a field is given."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runner.results.schema import (
    Assertion,
    Evidence,
    EvidenceLine,
    LabInfo,
    Phase,
    RunResult,
    ScenarioResult,
    TimelineEvent,
    Verdict,
)

NOW = datetime.now(UTC)


def scenario_result(text: str = "x", **fields: Any) -> ScenarioResult:
    """A failed scenario: one failed assertion, one timeline event, one evidence line, one note,
    each saying `text`; `fields` replace any of ScenarioResult's."""
    base: dict[str, Any] = {
        "id": "s1",
        "title": text,
        "file": "scenarios/s1.yaml",
        "lab": "local",
        "verdict": Verdict.FAILED,
        "time_to_fail_s": 9.0,
        "time_to_recover_s": None,
        "started_at": NOW,
        "finished_at": NOW,
        "assertions": [
            Assertion(
                name="expect: exit code",
                phase=Phase.EXPECT,
                verdict=Verdict.FAILED,
                expected="exit code 0",
                observed=text,
            )
        ],
        "timeline": [TimelineEvent(ts=NOW, source="log:serving", clock="runtime", event=text)],
        "evidence": [
            Evidence(title="logs", lines=[EvidenceLine(ts=NOW, text=text, highlight=True)])
        ],
        "notes": [text],
    }
    return ScenarioResult(**(base | fields))


def run_result(*scenarios: ScenarioResult, **fields: Any) -> RunResult:
    """A run of `scenarios` on a local lab; its verdict is the first scenario's unless given."""
    base: dict[str, Any] = {
        "run_id": "r1",
        "gameday_version": "0",
        "started_at": NOW,
        "finished_at": NOW,
        "lab": LabInfo(
            name="local", kind="local", inventory="i", time_scale=100, timing_allowance_s=0.1
        ),
        "verdict": scenarios[0].verdict if scenarios else Verdict.SKIPPED,
        "scenarios": list(scenarios),
    }
    return RunResult(**(base | fields))
