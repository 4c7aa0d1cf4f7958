"""Every phase of a run, on the in-process fake lab: passing, failing, erring, interrupted, and
cleaned up after each."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.results import Phase, ScenarioResult, Verdict
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag


def by_name(result: ScenarioResult) -> dict[str, Verdict]:
    return {a.name: a.verdict for a in result.assertions}


def test_a_startup_failure_passes_every_assertion(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag(exit_after_s=0.2))
    result = run.run()
    assert by_name(result) == {
        "baseline: GET /health": Verdict.PASSED,
        "baseline: inference (chat)": Verdict.PASSED,
        "expect: signature 1/2: Loading weights": Verdict.PASSED,
        "expect: signature 2/2: max_model_len \\((?P<n>\\d+)\\) is too large": Verdict.PASSED,
        "expect: exit code": Verdict.PASSED,
        "expect: time to fail": Verdict.PASSED,
        "recover 1: Restart and hope: does NOT restore service": Verdict.PASSED,
        "recover 2: Roll back: restores service": Verdict.PASSED,
        "verify: GET /health": Verdict.PASSED,
        "verify: inference (chat)": Verdict.PASSED,
        "verify: time to recover": Verdict.PASSED,
    }
    assert result.verdict is Verdict.PASSED
    assert result.time_to_fail_s == 200.0  # 0.2 lab s from first output to exit, x1000
    assert result.time_to_recover_s is not None and result.time_to_recover_s < 600
    assert run.lab.leftovers() == []
    assert run.open_changes() == 0


def test_phases_are_a_closed_set(tmp_path: Path) -> None:
    result = fake_run(tmp_path, scenario_doc(), wrong_flag()).run()
    assert {a.phase for a in result.assertions} == {
        Phase.BASELINE,
        Phase.EXPECT,
        Phase.RECOVER,
        Phase.VERIFY,
    }


def test_no_failure_within_the_window_fails_and_cleans_up(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc())  # the node serves whatever its args
    result = run.run()
    failed = [a for a in result.assertions if a.verdict is Verdict.FAILED]
    assert [a.name for a in failed] == ["expect: failure happens"]
    assert failed[0].observed.startswith("no exit within 0.30 lab s; node running, ready=True")
    assert result.verdict is Verdict.FAILED
    assert run.lab.leftovers() == [] and run.open_changes() == 0


@pytest.mark.parametrize(
    ("after_s", "verdict", "observed"),
    [
        (0.2, Verdict.PASSED, "200.0 s real"),
        (0.31, Verdict.FAILED, "310.0 s real"),  # over 300 s plus 2 s of allowance
        (0.05, Verdict.FAILED, "50.0 s real"),  # under 100 s less the allowance
    ],
)
def test_time_to_fail_is_judged_against_the_window(
    tmp_path: Path, after_s: float, verdict: Verdict, observed: str
) -> None:
    result = fake_run(tmp_path, scenario_doc(), wrong_flag(exit_after_s=after_s)).run()
    ttf = next(a for a in result.assertions if a.name == "expect: time to fail")
    assert (ttf.verdict, ttf.observed.split(" (")[0]) == (verdict, observed)


def test_a_wrong_exit_code_fails_that_assertion_only(tmp_path: Path) -> None:
    result = fake_run(tmp_path, scenario_doc(), wrong_flag(code=2)).run()
    failed = {a.name: a.observed for a in result.assertions if a.verdict is Verdict.FAILED}
    assert failed == {"expect: exit code": "exit code 2"}


def test_a_missing_signature_line_fails_with_where_it_looked(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["expect"]["signature"]["in_order"].append({"regex": "never logged"})
    result = fake_run(tmp_path, doc, wrong_flag()).run()
    failed = {a.name: a.observed for a in result.assertions if a.verdict is Verdict.FAILED}
    assert failed == {
        "expect: signature 3/3: never logged": "not found after the previous pattern's line in "
        "2 lines of previous logs (incarnation 2)"
    }


def test_crash_loop_state_is_asserted_with_restarts(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["expect"]["state"] = {"status": "crash_looping", "min_restarts": 1}
    looping = fake_run(tmp_path / "a", doc, wrong_flag(restarts=1)).run()
    once = fake_run(tmp_path / "b", doc, wrong_flag(restarts=0)).run()
    state = "expect: state"
    assert by_name(looping)[state] is Verdict.PASSED
    assert by_name(once)[state] is Verdict.FAILED
    assert [a.observed for a in once.assertions if a.name == state] == [
        "crash_looping (no reason), restarts 0"
    ]
