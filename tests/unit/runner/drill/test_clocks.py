"""Two clocks and one rule: the system's times (time to fail, a drill's time to detect: the first
alert firing on the lab's scaled clock) are real-world seconds; people's times are wall seconds,
which are real-world seconds (the time scale speeds up the lab, not the people), so they meet a
window as they are. Results written before the rule are read with it. `gameday drill`'s own
summary at its end."""

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
from runner.results.durations import person_against, system_against
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


def test_a_person_s_wall_seconds_meet_the_window_as_they_are(tmp_path: Path) -> None:
    # 50 real-world seconds are 0.05 lab seconds on the fake lab (x1000), but a person's 0.1+
    # wall seconds are 0.1+ real-world seconds: well inside the window, whatever the scale
    doc = scenario_doc(verify={"probes": [HEALTH, INFERENCE], "time_to_recover": {"max_s": 50}})
    run = fake_run(tmp_path, doc, wrong_flag())

    def person(d: Drill) -> None:
        time.sleep(0.1)
        rollback(d)

    _d, result = drilled(run, person)
    d = result.drill
    assert d is not None and d.outcome is DrillOutcome.RECOVERED
    assert d.time_to_recover_s is not None and 0.1 < d.time_to_recover_s < 50
    assert d.time_scale == SCALE
    [check] = [a for a in result.assertions if a.name == "drill: time to recover"]
    assert check.verdict is Verdict.PASSED
    assert check.expected == (
        "recovered within 50 s of the fault (a person's wall seconds: the time scale speeds up "
        "the lab, not the people)"
    )
    assert check.observed == f"recovered in {d.time_to_recover_s:.1f} s wall"
    assert result.verdict is Verdict.PASSED
    # the scenario's time to recover is the people's wall seconds, not multiplied by the scale
    assert result.time_to_recover_s == d.time_to_recover_s
    assert dict(drill_times.summary(d))["time to recover"] == (
        f"{d.time_to_recover_s:.1f} s wall (within the 50 s window)"
    )


def test_a_person_s_time_meets_a_window_as_it_is_and_the_system_s_converted() -> None:
    assert person_against(146.0, 1800) == "146.0 s wall (within the 1800 s window)"
    assert person_against(1900.0, 1800) == "1900.0 s wall (OVER the 1800 s window)"
    assert person_against(None, 600) == "- (window 600 s)"
    assert person_against(12.0, None) == "12.0 s wall"
    # 5.9 wall seconds until the first alert fired, at x100, are 590 real-world seconds
    assert system_against(590.0, 100, 420) == "590.0 s [5.900 s lab] (OVER the 420 s window)"
    assert system_against(410.0, 100, 420) == "410.0 s [4.100 s lab] (within the 420 s window)"
    assert system_against(410.0, 1, 420) == "410.0 s (within the 420 s window)"
    assert system_against(None, 100, 420) == "- (window 420 s)"


def test_a_drill_s_detect_is_the_system_s_time_converted_by_the_scale() -> None:
    # 5.9 wall seconds until the first alert at x100 are 590 real-world seconds: over 420
    rows = dict(drill_times.summary(drill_result().scenarios[0].drill))  # type: ignore[arg-type]
    assert rows["time to detect (first alert)"] == ("590.0 s [5.900 s lab] (OVER the 420 s window)")
    assert rows["time to recover"] == "146.0 s wall (within the 1800 s window)"
    assert rows["time to acknowledge"] == "12.0 s wall"


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
    assert s.time_to_detect_s == pytest.approx(590.0)  # the system's: converted
    assert s.time_to_recover_s == 146.0  # the people's: wall seconds as they are


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
        time_to_recover_s=146.0,
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
    assert lines[:9] == [
        "gameday drill r1 on lab local (time scale x100)",
        "head-only-restart  failed",
        "  time to fail                  150.0 s [1.500 s lab] (the system's)",
        "  outcome                       recovered",
        "  time to detect (first alert)  590.0 s [5.900 s lab] (OVER the 420 s window)",
        "  time to acknowledge           12.0 s wall",
        "  time to recover               146.0 s wall (within the 1800 s window)",
        "  hints used                    1",
        "  shortcuts tried               1",
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


@pytest.mark.parametrize("width", [200, 80])
def test_a_drill_s_recover_time_is_never_shown_with_a_lab_bracket(
    width: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # "time to recover 146.0 s [1.460 s lab]" read the people's wall seconds as the lab's
    result = drill_result()
    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=width, soft_wrap=True))
    output.run_summary(result, "reports/r1")  # `gameday report`'s table (or its blocks)
    write_reports(result, tmp_path)
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    for text in (buf.getvalue(), md, page):
        assert "146.0 s wall" in text
        assert "[1.460 s lab]" not in text and "14600" not in text
        assert "590.0 s [5.900 s lab]" in text  # the detect: the system's, real-world
    assert (
        "| head-only-restart | failed | 150.0 s [1.500 s lab] | 590.0 s [5.900 s lab] | "
        "146.0 s wall |" in md
    )
    assert "<td>590.0 s [5.900 s lab]</td><td>146.0 s wall</td></tr>" in page
    assert "the time scale speeds up the lab, not the people" in md


def test_a_run_s_recover_time_keeps_its_lab_bracket(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=200, soft_wrap=True))
    s = scenario_result("x", id="kv", time_to_recover_s=300.0)
    output.run_summary(run_result(s), "reports/r1")
    assert "300.0 s [3.000 s lab]" in buf.getvalue() and " wall" not in buf.getvalue()


def test_a_drill_gives_people_the_whole_window_whatever_the_lab_s_scale() -> None:
    """The default timeout is the window as it is (not the window in lab seconds: 18 s at x100
    for head-only-restart's 1800 s), at least MIN_TIMEOUT_S."""
    from runner.drill.session import MIN_TIMEOUT_S, default_timeout
    from runner.spec.catalogue import builtin_dir
    from runner.spec.scenario import load_scenario

    head = load_scenario(builtin_dir() / "head-only-restart.yaml")
    assert default_timeout(head) == 1800
    short = load_scenario(builtin_dir() / "context-window-overflow.yaml")
    window = short.scenario.verify.time_to_recover.max_s
    assert default_timeout(short) == max(window, MIN_TIMEOUT_S)
