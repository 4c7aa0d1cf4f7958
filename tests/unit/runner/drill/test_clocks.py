"""Two clocks and one rule: a drill's people's times are wall seconds, a scenario's windows
real-world seconds, and a person's time meets a window only converted by the lab's time scale.
Results written before the rule are read with it. `gameday drill`'s own summary at its end."""

from __future__ import annotations

import io
import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

from runner.cli import output
from runner.drill.session import Drill
from runner.report import drill_times, write_reports
from runner.results.drill_record import ActionKind, HintView, ObservedAction
from runner.results.durations import wall_against
from runner.results.schema import (
    DrillOutcome,
    DrillRecord,
    RunMode,
    RunResult,
    Verdict,
    load_result,
)
from runner.spec.kinds import Outcome
from tests.support.fakelab import HEALTH, INFERENCE, SCALE, fake_run, scenario_doc, wrong_flag
from tests.support.results import NOW, run_result, scenario_result
from tests.unit.runner.drill.test_session import drilled, rollback


def test_a_drill_inside_the_window_in_wall_seconds_but_over_it_real_world_fails(
    tmp_path: Path,
) -> None:
    # 50 real-world seconds are 0.05 wall seconds on the fake lab (x1000): a person's rollback
    # takes longer than that, though far less than 50 wall seconds
    doc = scenario_doc(verify={"probes": [HEALTH, INFERENCE], "time_to_recover": {"max_s": 50}})
    run = fake_run(tmp_path, doc, wrong_flag())

    def person(d: Drill) -> None:
        time.sleep(0.1)  # 100 s real-world at x1000
        rollback(d)

    _d, result = drilled(run, person)
    d = result.drill
    assert d is not None and d.outcome is DrillOutcome.RECOVERED
    assert d.time_to_recover_s is not None and 0.05 < d.time_to_recover_s < 50
    assert d.time_scale == SCALE
    [check] = [a for a in result.assertions if a.name == "drill: time to recover"]
    assert check.verdict is Verdict.FAILED
    assert check.expected == "recovered within 50 s of the fault (real-world): 0.1 s wall at x1000"
    real = d.time_to_recover_s * SCALE
    assert check.observed == (
        f"recovered in {d.time_to_recover_s:.1f} s wall ({real:.1f} s real-world)"
    )
    assert result.verdict is Verdict.FAILED
    # the scenario's own fields are real-world, as in a run; the record keeps the wall seconds
    assert result.time_to_recover_s == pytest.approx(real)
    assert "OVER the 50 s window" in dict(drill_times.summary(d))["time to recover"]


def test_a_person_s_time_is_converted_before_it_meets_a_window() -> None:
    # 5.9 wall seconds at x100 are 590 real-world seconds: outside a 420 s window
    assert wall_against(5.9, 100, 420) == (
        "5.9 s wall (590.0 s real-world at x100: OVER the 420 s window)"
    )
    assert wall_against(4.1, 100, 420) == (
        "4.1 s wall (410.0 s real-world at x100: within the 420 s window)"
    )
    assert wall_against(146.0, 1, 600) == "146.0 s wall (within the 600 s window)"
    assert wall_against(None, 100, 600) == "- (window 600 s real-world)"
    assert wall_against(12.0, 100, None) == "12.0 s wall"


def older_drill(tmp_path: Path, **drill: object) -> Path:
    """A drill's result.json as gameday wrote it before the rule: no `mode` key where it is
    left out, the scenario's times in wall seconds, no `time_scale` in the record."""
    record = {"handed_over_at": NOW.isoformat(), "outcome": "recovered", **drill}
    s = scenario_result("x", id="kv", time_to_detect_s=5.9, time_to_recover_s=146.0)
    data = json.loads(run_result(s).model_dump_json())
    data["scenarios"][0]["drill"] = record | {"time_to_detect_s": 5.9, "time_to_recover_s": 146.0}
    del data["mode"]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(data))
    return path


def test_an_older_drill_s_result_is_read_with_the_rule(tmp_path: Path) -> None:
    r = load_result(older_drill(tmp_path))
    assert r.mode is RunMode.DRILL  # it holds a drill's record
    [s] = r.scenarios
    assert s.drill is not None and s.drill.time_scale == 100  # the lab's
    assert (s.drill.time_to_detect_s, s.drill.time_to_recover_s) == (5.9, 146.0)
    assert s.time_to_detect_s == pytest.approx(590.0)
    assert s.time_to_recover_s == pytest.approx(14600.0)


def test_a_result_with_the_scale_recorded_is_read_as_written(tmp_path: Path) -> None:
    r = load_result(older_drill(tmp_path, time_scale=100.0))
    assert (r.scenarios[0].time_to_detect_s, r.scenarios[0].time_to_recover_s) == (5.9, 146.0)
    plain = tmp_path / "run.json"
    data = json.loads(run_result(scenario_result()).model_dump_json())
    del data["mode"]
    plain.write_text(json.dumps(data))
    assert load_result(plain).mode is RunMode.RUN


SHORTCUT = ObservedAction(
    at_s=42.5,
    kind=ActionKind.RESTART,
    nodes=("node1",),
    detail="restarted",
    step="Restart the head alone (what `--restart always` would do)",
    outcome=Outcome.DOES_NOT_RESTORE,
    shortcut=True,
    why="the workers' process group is already broken; they never rejoin a new head",
)


def drill_result(mode: RunMode = RunMode.DRILL) -> RunResult:
    record = DrillRecord(
        handed_over_at=NOW,
        time_to_detect_s=5.9,
        time_to_acknowledge_s=12.0,
        time_to_recover_s=146.0,
        hints=[HintView(index=1, text="What do the workers say?", at_s=60.0, requested=True)],
        actions=[SHORTCUT],
        shortcuts=[SHORTCUT],
        outcome=DrillOutcome.RECOVERED,
        detect_within_s=420.0,
        recover_within_s=1800.0,
        time_scale=100.0,
    )
    s = scenario_result(
        "x",
        id="head-only-restart",
        time_to_fail_s=150.0,
        time_to_detect_s=590.0,
        time_to_recover_s=14600.0,
        drill=record,
        finished_at=NOW + timedelta(minutes=3),
    )
    return run_result(s, mode=mode)


def test_the_drill_s_terminal_summary_is_a_drill_s_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=80, soft_wrap=True))
    output.drill_summary(drill_result(), "reports/r1")
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "┃" not in buf.getvalue()  # not the run's table
    assert lines[:10] == [
        "gameday drill r1 on lab local (time scale x100)",
        "head-only-restart  failed",
        "  time to fail                  150.0 s [1.500 s lab] (the system's)",
        "  outcome                       recovered",
        "  time to detect (first alert)  5.9 s wall (590.0 s real-world at x100: OVER the",
        "                                420 s window)",
        "  time to acknowledge           12.0 s wall",
        "  time to recover               146.0 s wall (14600.0 s real-world at x100: OVER",
        "                                the 1800 s window)",
        "  hints used                    1",
    ]
    text = "\n".join(lines)
    for line in (
        "  shortcuts tried               1",
        "    at 42.5 s wall              Restart the head alone (what `--restart always`",
        "    hint 1                      asked for at 60.0 s wall: What do the workers",
        "FAILED head-only-restart: expect: exit code",
        "verdict: failed",
    ):
        assert line in lines, text
    assert "they never rejoin a new head" in text  # the why, after the drill


def test_a_seat_s_drill_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=80, soft_wrap=True))
    output.drill_summary(drill_result(RunMode.SEAT), "reports/r1")
    assert buf.getvalue().startswith("gameday seat drill r1 on lab local")
    write_reports(drill_result(RunMode.SEAT), tmp_path)
    assert load_result(tmp_path / "result.json").mode is RunMode.SEAT
