"""Every phase of a run, on the in-process fake lab: passing, failing, erring, interrupted, and
cleaned up after each."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.results.schema import Phase, ScenarioResult, Verdict
from tests.support.fakelab import WRONG_FLAG_LOGS as WRONG_LOGS
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag

ROLL_BACK = {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]}


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
    assert re.match(
        r"no exit within 0\.3\d lab s; node running, ready=True, writing output",
        failed[0].observed,
    )
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


# ---- baseline ----


def test_a_target_that_never_serves_is_an_error_not_a_failure(tmp_path: Path) -> None:
    from runner.labs.fake import Hangs

    run = fake_run(tmp_path, scenario_doc(), lambda _n, _c: Hangs(logs=("booting",)))
    result = run.run()
    assert [(a.name, a.verdict) for a in result.assertions] == [
        ("baseline: target ready", Verdict.ERROR),
        ("cleanup: baseline restored", Verdict.ERROR),
    ]
    assert result.assertions[0].observed == "running, ready=False after 0.1 lab s"
    assert result.verdict is Verdict.ERROR
    assert run.lab.applied == []  # nothing was injected


def test_a_node_left_changed_stops_the_run_before_injecting(tmp_path: Path) -> None:
    from runner.labs.base import ChangeKind
    from runner.labs.common.planning import plan_change
    from runner.spec.actions import SetArgs

    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    left = plan_change(run.lab, SetArgs(kind="set_args", node="serving", args={"--seed": 1}))
    run.lab.apply(left)
    result = run.run()
    assert [(a.name, a.verdict) for a in result.assertions] == [("lab", Verdict.ERROR)]
    assert result.assertions[0].observed == (
        "node serving is not at its baseline configuration\n"
        "  hint: a previous run left changes behind: run `gameday cleanup`"
    )
    assert [c.kind for c in run.lab.applied] == [ChangeKind.NODE_CONFIG]  # only the test's own


# ---- recover ----


def test_a_shortcut_that_restores_service_fails_the_scenario(tmp_path: Path) -> None:
    # the fault goes away by itself on the next start: the "restart and hope" step works
    starts = {"n": 0}

    def once(node: str, config: object) -> object:
        starts["n"] += node == "serving"
        return wrong_flag()(node, config) if starts["n"] == 2 else wrong_flag()(node, _base())

    run = fake_run(tmp_path, scenario_doc(), once)  # type: ignore[arg-type]
    result = run.run()
    shortcut = next(a for a in result.assertions if "does NOT restore" in a.name)
    assert shortcut.verdict is Verdict.FAILED
    # one clause per finding, each separated: never "...is wrong)GET /health: ..."
    assert shortcut.observed == (
        "restored (the shortcut worked, so the scenario's claim is wrong); "
        "GET /health: HTTP 200; inference (chat): HTTP 200, 2 chars, finish_reason stop: 'OK'"
    ), shortcut.observed


def _base() -> object:
    from runner.labs.base import NodeConfig

    return NodeConfig(args=(), env={})


def test_a_fix_that_does_not_restore_fails_with_the_probes_it_saw(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["recover"] = [
        {
            "name": "Restart",
            "outcome": "restores",
            "actions": [{"kind": "restart", "nodes": ["serving"]}],
        }
    ]
    run = fake_run(tmp_path, doc, wrong_flag())
    result = run.run()
    restores = next(
        a for a in result.assertions if a.name == "recover 1: Restart: restores service"
    )
    assert restores.verdict is Verdict.FAILED
    # why, not only the state: the node's own last error line, and that no probe could run
    assert restores.observed == (
        "not restored: node crash_looping, ready=False; its last error line: "
        "ValueError: max_model_len (99999) is too large; not ready within the window, so no "
        "probe ran"
    )
    assert result.time_to_recover_s is None
    assert run.lab.leftovers() == [] and run.open_changes() == 0  # cleanup rolled back


# ---- errors and interrupts ----


def test_a_lab_error_mid_run_is_the_verdict_and_cleanup_still_runs(tmp_path: Path) -> None:
    from runner.errors import LabError

    run = fake_run(tmp_path, scenario_doc(), wrong_flag())

    def fail_restart(name: str) -> None:
        if name == "restart":
            raise LabError("the lab lost its node")

    run.lab.on_call = fail_restart
    result = run.run()
    assert (result.assertions[-1].name, result.assertions[-1].verdict) == ("lab", Verdict.ERROR)
    assert result.assertions[-1].observed == "the lab lost its node"
    run.lab.on_call = lambda _n: None
    assert run.lab.leftovers() == [] and run.open_changes() == 0


def test_a_bug_is_an_error_with_its_traceback(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())

    def bug(name: str) -> None:
        if name == "apply node_config" and not run.lab.applied:
            raise ZeroDivisionError("division by zero")

    run.lab.on_call = bug
    result = run.run()
    lab = next(a for a in result.assertions if a.name == "lab")
    assert (lab.verdict, lab.observed) == (Verdict.ERROR, "ZeroDivisionError: division by zero")
    assert "Traceback (most recent call last)" in lab.detail
    assert run.lab.leftovers() == [] and run.open_changes() == 0


@pytest.mark.parametrize(
    ("call", "nth", "phase"),
    [
        ("states", 1, "baseline"),
        ("apply node_config", 1, "inject"),
        ("wait_events", 1, "expect"),
        ("restart", 1, "recover 1/2"),
        ("apply node_config", 2, "recover 2/2"),
    ],
)
def test_an_interrupt_in_any_phase_still_cleans_up(
    tmp_path: Path, call: str, nth: int, phase: str
) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    seen = {"n": 0}
    interrupted_in: list[str] = []

    def interrupt(name: str) -> None:
        if name == call:
            seen["n"] += 1
            if seen["n"] == nth:
                run.lab.on_call = lambda _n: None  # cleanup's own calls go through
                interrupted_in.append(run.progress[-1])
                raise KeyboardInterrupt

    run.lab.on_call = interrupt
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert interrupted_in[0].startswith(phase), interrupted_in
    assert run.progress[-1] == "cleanup"
    assert run.lab.leftovers() == []
    assert run.open_changes() == 0


# ---- cleanup ----


def test_cleanup_restarts_a_group_together_when_only_its_head_was_reapplied(
    tmp_path: Path,
) -> None:
    from runner.labs.fake import Exits, Serves

    doc = scenario_doc(target="node1")
    doc["inject"] = [{"kind": "set_args", "node": "node1", "args": {"--max-model-len": 99999}}]
    restart_head = {"kind": "restart", "nodes": ["node1"]}
    doc["recover"] = [
        {"name": "Restart the head", "outcome": "restores", "actions": [restart_head]}
    ]
    doc["verify"]["probes"] = [{"kind": "http", "path": "/health", "node": "node1"}]
    # the head rejoins only if restarted with its workers (the head-only-restart lesson)
    group_started = {"together": True}

    def script(node: str, config: object) -> object:
        if "99999" in getattr(config, "args", ()):
            return Exits(
                code=1,
                logs=("INFO Loading weights", "max_model_len (99999) is too large"),
                after_s=0.2,
            )
        if node == "node1" and not group_started["together"]:
            return Exits(code=1, logs=("TCPStore: broken pipe",), after_s=0.01)
        return Serves()

    run = fake_run(tmp_path, doc, script)  # type: ignore[arg-type]
    real_restart = run.lab.restart

    def restart(nodes: list[str]) -> None:
        group_started["together"] = set(nodes) == {"node1", "node2"}
        real_restart(nodes)

    run.lab.restart = restart  # type: ignore[method-assign]
    result = run.run()
    assert run.lab.restarted == [["node1"], ["node1", "node2"]]
    assert [
        e.event for e in result.timeline if e.event.startswith(("cleanup: restart", "baseline"))
    ] == [
        "cleanup: restart node1, node2 together",
        "baseline serving again",
    ]


def test_a_cleanup_that_cannot_restore_the_baseline_says_so(tmp_path: Path) -> None:
    from runner.errors import LabError

    doc = scenario_doc()
    restart = {"kind": "restart", "nodes": ["serving"]}
    # no rollback: cleanup undoes the injection
    doc["recover"] = [{"name": "Restart", "outcome": "restores", "actions": [restart]}]
    run = fake_run(tmp_path, doc, wrong_flag())

    def broken_undo(name: str) -> None:
        if name == "apply node_config" and run.lab.applied:  # the injection's undo
            raise LabError("the API server is gone")

    run.lab.on_call = broken_undo
    result = run.run()
    last = result.assertions[-1]
    assert (last.name, last.phase, last.verdict) == (
        "cleanup: baseline restored",
        Phase.CLEANUP,
        Verdict.ERROR,
    )
    assert last.observed == "cleanup failed: the API server is gone"
    assert last.detail == "run `gameday cleanup` to undo what is left"
    assert run.open_changes() == 1  # the journal still holds the change for `gameday cleanup`


def _stopped_engine(recovery: dict[str, object]) -> dict[str, object]:
    doc = scenario_doc()
    doc["inject"] = [
        {"kind": "signal", "node": "serving", "process": "engine_core", "signal": "STOP"}
    ]
    doc["expect"] = {
        "failure": "silent",
        "probes": [{"kind": "node_state", "node": "serving", "status": "running"}],
        "time_to_fail": {"max_s": 60},
    }
    doc["recover"] = [{"name": "Recover", "outcome": "restores", "actions": [recovery]}]
    return doc


def test_cleanup_restarts_an_engine_left_stopped(tmp_path: Path) -> None:
    # a stopped engine answers /health: it looks ready, and only a restart brings it back
    doc = _stopped_engine({"kind": "wait", "why": "nothing"})
    run = fake_run(tmp_path, doc)
    result = run.run()
    assert run.lab.restarted == [["serving"]]
    assert "cleanup: restart serving together (an engine left stopped)" in [
        e.event for e in result.timeline
    ]


def test_an_engine_restarted_after_its_stop_is_not_restarted_again(tmp_path: Path) -> None:
    doc = _stopped_engine({"kind": "restart", "nodes": ["serving"]})
    run = fake_run(tmp_path, doc)
    run.run()
    assert run.lab.restarted == [["serving"]]  # the recovery step's own


# ---- detect ----


def _alerting(doc: dict[str, object]) -> dict[str, object]:
    doc["detect"] = {"alerts": [{"name": "ServingDown", "within_s": 400}]}
    return doc


def _after_a_quiet_baseline(
    alerts: Callable[[], list[dict[str, object]]],
) -> Callable[[], list[dict[str, object]]]:
    """Prometheus's alerts as `alerts` gives them, but none at the first look: the baseline's,
    which must find the scenario's alerts quiet before the injection."""
    looks: list[int] = []

    def answer() -> list[dict[str, object]]:
        looks.append(1)
        return [] if len(looks) == 1 else alerts()

    return answer


def test_an_alert_firing_in_time_gives_the_time_to_detect(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    fired: dict[str, datetime] = {}

    def alerts() -> list[dict[str, object]]:
        active = fired.setdefault("at", datetime.now(UTC))  # pending from the first look
        return [
            {
                "labels": {"alertname": "ServingDown"},
                "state": "firing",
                "activeAt": active.isoformat().replace("+00:00", "Z"),
            }
        ]

    run = fake_run(
        tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=_after_a_quiet_baseline(alerts)
    )
    result = run.run()
    detect = next(a for a in result.assertions if a.phase is Phase.DETECT)
    assert (detect.name, detect.verdict) == ("detect: alert ServingDown fires", Verdict.PASSED)
    # the lab's rule ServingDown has `for: 300` (real s): it fires 300 s real after it is
    # pending, by Prometheus's clock; pending began at the detect phase's first look, which a
    # loaded machine may delay by up to a second or two of wall time (x1000 here) after injection
    ttd = result.time_to_detect_s
    assert ttd is not None and 300 <= ttd < 2300
    assert detect.observed == f"firing {ttd:.1f} s real after the injection"
    fired_at = next(e for e in result.timeline if e.event == "alert ServingDown firing").ts
    assert fired_at == fired["at"] + timedelta(seconds=0.3)


def test_an_alert_firing_since_before_the_injection_is_not_its_detection(tmp_path: Path) -> None:
    """An alert active since before the injection (one that became pending again after the
    baseline found it quiet) is not this fault's detection."""
    from datetime import UTC, datetime, timedelta

    booted = datetime.now(UTC) - timedelta(seconds=30)

    def alerts() -> list[dict[str, object]]:
        stale = booted.isoformat().replace("+00:00", "Z")
        return [{"labels": {"alertname": "ServingDown"}, "state": "firing", "activeAt": stale}]

    run = fake_run(
        tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=_after_a_quiet_baseline(alerts)
    )
    result = run.run()
    detect = next(a for a in result.assertions if a.phase is Phase.DETECT)
    assert (detect.verdict, detect.observed) == (Verdict.FAILED, "inactive after 400 s real")


def test_an_alert_that_never_fires_fails_detect(tmp_path: Path) -> None:
    run = fake_run(tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=list)
    result = run.run()
    detect = next(a for a in result.assertions if a.phase is Phase.DETECT)
    assert (detect.verdict, detect.observed) == (Verdict.FAILED, "inactive after 400 s real")
    assert result.time_to_detect_s is None


def test_prometheus_not_answering_is_a_detect_error(tmp_path: Path) -> None:
    import httpx

    def down() -> list[dict[str, object]]:
        raise httpx.ConnectError("connection refused")

    run = fake_run(
        tmp_path, _alerting(scenario_doc()), wrong_flag(), alerts=_after_a_quiet_baseline(down)
    )
    result = run.run()
    detect = next(a for a in result.assertions if a.phase is Phase.DETECT)
    assert detect.verdict is Verdict.ERROR
    assert detect.observed.startswith("probe error: ") and "connection refused" in detect.observed


def test_times_measured_before_an_error_stay_in_the_result(tmp_path: Path) -> None:
    from runner.errors import LabError

    run = fake_run(tmp_path, scenario_doc(), wrong_flag(exit_after_s=0.2))

    def fail_restart(name: str) -> None:
        if name == "restart":
            raise LabError("the lab lost its node")

    run.lab.on_call = fail_restart
    result = run.run()
    assert (result.time_to_fail_s, result.time_to_recover_s) == (200.0, None)


def test_a_node_that_comes_back_by_itself_is_not_restarted_by_cleanup(tmp_path: Path) -> None:
    doc = scenario_doc()
    restart = {"kind": "restart", "nodes": ["serving"]}
    doc["recover"] = [{"name": "Restart", "outcome": "restores", "actions": [restart]}]
    run = fake_run(tmp_path, doc, wrong_flag())
    result = run.run()
    # cleanup's undo re-applies the baseline: the node serves again, no group restart
    assert run.lab.restarted == [["serving"]]  # the recovery step's own
    cleanup = [e.event for e in result.timeline if e.event.startswith("cleanup")]
    model = "Qwen/Qwen2.5-0.5B-Instruct --port 8000"
    assert cleanup == [f"cleanup: restore serving: args {model} --max-model-len 99999 -> {model}"]


# ---- the other expectations ----


def test_a_shortcut_with_its_own_signature(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["recover"][0]["expect"] = {"in_order": [{"regex": "max_model_len \\(99999\\)"}]}
    result = fake_run(tmp_path, doc, wrong_flag()).run()
    names = {a.name: (a.phase, a.verdict) for a in result.assertions}
    assert names["recover 1: Restart and hope: signature 1/1: max_model_len \\(99999\\)"] == (
        Phase.RECOVER,
        Verdict.PASSED,
    )
    titles = [e.title for e in result.evidence]
    assert titles == [
        "expect: previous logs (incarnation 2)",
        "recover 1: Restart and hope: logs of incarnation 3",
    ]


def test_lines_another_node_must_log_after_the_failure(tmp_path: Path) -> None:
    from runner.labs.fake import Exits, Serves

    doc = scenario_doc(target="node1")
    doc["inject"] = [{"kind": "set_args", "node": "node1", "args": {"--max-model-len": 99999}}]
    doc["expect"]["elsewhere"] = [
        {"node": "node2", "within_s": 60, "in_order": [{"regex": "TCPStore.*Broken pipe"}]}
    ]
    doc["recover"] = [
        {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]}
    ]
    doc["verify"]["probes"] = [{"kind": "http", "path": "/health", "node": "node1"}]
    lab_ref: list[object] = []

    def script(node: str, config: object) -> object:
        if "99999" in getattr(config, "args", ()):
            # the worker notices its head is gone: a line in its current log, after the exit
            worker = lab_ref[0]._nodes["node2"]  # type: ignore[attr-defined]
            from datetime import timedelta

            from runner.labs.base import LogLine

            first = worker.logs[worker.incarnation][0].ts
            worker.logs[worker.incarnation].append(
                LogLine(ts=first + timedelta(seconds=5), text="[W] TCPStore: Broken pipe")
            )
            return Exits(code=1, logs=WRONG_LOGS, after_s=0.2)
        return Serves()

    run = fake_run(tmp_path, doc, script)  # type: ignore[arg-type]
    lab_ref.append(run.lab)
    result = run.run()
    names = {a.name: a.verdict for a in result.assertions}
    assert names["expect on node2: signature 1/1: TCPStore.*Broken pipe"] is Verdict.PASSED
    assert names["expect on node2: within 60 s"] is Verdict.PASSED
    worker_lines = [e for e in result.timeline if e.source == "log:node2"]
    assert [e.event for e in worker_lines] == ["log: [W] TCPStore: Broken pipe"]


def test_a_silent_failure_is_what_the_probes_see(tmp_path: Path) -> None:
    from runner.labs.fake import Hangs, Serves

    doc = scenario_doc()
    doc["expect"] = {
        "failure": "silent",
        "probes": [{"kind": "node_state", "node": "serving", "status": "running"}],
        "time_to_fail": {"max_s": 60},
    }
    doc["recover"] = [
        {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]}
    ]
    run = fake_run(
        tmp_path,
        doc,
        lambda _n, c: Hangs() if "99999" in c.args else Serves(),  # type: ignore[arg-type]
    )
    result = run.run()
    names = {a.name: a.verdict for a in result.assertions}
    assert names["expect: state of serving"] is Verdict.PASSED
    assert names["expect: time to fail"] is Verdict.PASSED
    assert result.time_to_fail_s is not None and result.time_to_fail_s < 60
    assert "failure observed (silent: seen by the probes)" in [e.event for e in result.timeline]


def test_a_node_that_must_not_be_restarted_by_its_policy(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["expect"]["state"] = {"status": "crash_looping", "min_restarts": 0, "max_restarts": 0}
    kept = fake_run(tmp_path / "a", doc, wrong_flag(restarts=0)).run()
    restarted = fake_run(tmp_path / "b", doc, wrong_flag(restarts=2)).run()
    state = "expect: state"
    assert by_name(kept)[state] is Verdict.PASSED
    assert by_name(restarted)[state] is Verdict.FAILED
    assert [a.observed for a in restarted.assertions if a.name == state] == [
        "crash_looping (no reason), restarts 2"
    ]


# ---- the timeline's texts for lab events ----


def test_lab_events_on_the_timeline() -> None:
    from datetime import UTC, datetime, timedelta

    from runner.labs.base import EventType, ExitInfo, LabEvent
    from runner.run.record import Recorder

    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    ended = ExitInfo(
        incarnation=3, code=0, started_at=t0, first_output_at=None, finished_at=t0 + timedelta(1)
    )
    rec = Recorder()
    for e in [
        LabEvent(seq=1, ts=t0, node="n", type=EventType.STARTED, incarnation=2, pid=41),
        LabEvent(seq=2, ts=t0, node="n", type=EventType.BACKOFF, delay_s=0.1, restarts=1),
        LabEvent(seq=3, ts=t0, node="n", type=EventType.EXITED, exit=ended),
        LabEvent(seq=4, ts=t0, node="n", type=EventType.EXITED, exit=ended, stopped=True),
        LabEvent(
            seq=5,
            ts=t0,
            node="n",
            type=EventType.EXITED,
            exit=ended,
            stopped=True,
            stop_took_s=0.25,
        ),
        LabEvent(seq=6, ts=t0, node="n", type=EventType.READY, incarnation=2),
    ]:
        rec.lab_event(e)
    assert [(e.event, e.ts, e.clock) for e in rec.timeline] == [
        ("started incarnation 2 pid 41", t0, "lab runtime (UTC)"),
        ("back-off 0.100 s (restarts 1)", t0, "lab runtime (UTC)"),
        ("exited with code 0 (incarnation 3)", ended.finished_at, "lab runtime (exit time)"),
        (
            "stopped by the lab to re-apply (exit 0, incarnation 3)",
            ended.finished_at,
            "lab runtime (exit time)",
        ),
        (
            "stopped by the lab to re-apply (exit 0, incarnation 3, 0.250 s after SIGTERM)",
            ended.finished_at,
            "lab runtime (exit time)",
        ),
        ("ready", t0, "lab runtime (UTC)"),
    ]


def test_lab_events_cross_a_socket_as_json_unchanged() -> None:
    import json
    from datetime import UTC, datetime

    from runner.labs.base import EventType, ExitInfo, LabEvent

    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    info = ExitInfo(incarnation=1, code=1, started_at=t0, first_output_at=t0, finished_at=t0)
    events = [
        LabEvent(seq=1, ts=t0, node="n", type=EventType.EXITED, exit=info, stop_took_s=0.5),
        LabEvent(seq=2, ts=t0, node="n", type=EventType.AUX_STARTED, name="node-exporter"),
    ]
    # as the local supervisor writes them and its driver reads them back
    wire = [json.dumps(e.model_dump(mode="json", exclude_defaults=True)) for e in events]
    assert [LabEvent.model_validate(json.loads(w)) for w in wire] == events
    assert events[0].failure == info and events[1].failure is None


PIPE = {"regex": "Broken pipe"}


@pytest.mark.parametrize(
    ("edit", "name", "verdict", "observed"),
    [
        (
            {"phase": "weights_load"},
            "expect: phase where it broke",
            Verdict.PASSED,
            "weights_load",  # "Loading weights took" is the last start-up marker logged
        ),
        (
            {"phase": "kv_cache_check"},
            "expect: phase where it broke",
            Verdict.FAILED,
            "weights_load",
        ),
        (
            {"signature": {"source": "previous", "in_order": [{"regex": "Loading weights"}],
                           "absent": [{"regex": "too large"}]}},
            "expect: absent: too large",
            Verdict.FAILED,
            "line 1: ValueError: max_model_len (99999) is too large",
        ),
        (
            {"elsewhere": [{"node": "node2", "within_s": 30, "in_order": [PIPE]}]},
            "expect on node2: signature 1/1: Broken pipe",
            Verdict.FAILED,
            # node2 logged only before the failure: nothing after it to match
            "not found in 0 lines of node2 logs after the failure (within 30 s real)",
        ),
    ],
)  # fmt: skip
def test_expectations_pass_and_fail_exactly(
    tmp_path: Path, edit: dict[str, object], name: str, verdict: Verdict, observed: str
) -> None:
    doc = scenario_doc()
    doc["expect"].update(edit)
    result = fake_run(tmp_path, doc, wrong_flag()).run()
    got = next(a for a in result.assertions if a.name == name)
    assert (got.verdict, got.observed) == (verdict, observed)


def test_a_shortcut_expected_to_fail_that_does_not_fail(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["recover"][0]["expect"] = {"in_order": [{"regex": "too large"}]}
    starts = {"n": 0}

    def healed_by_restart(node: str, config: object) -> object:
        starts["n"] += node == "serving"
        return wrong_flag()(node, config) if starts["n"] == 2 else wrong_flag()(node, _base())

    result = fake_run(tmp_path, doc, healed_by_restart).run()  # type: ignore[arg-type]
    got = next(a for a in result.assertions if a.name == "recover 1: Restart and hope: signature")
    assert (got.verdict, got.observed) == (Verdict.FAILED, "the node did not fail")


# ---- a step that masks the fault ----


def masking_doc() -> dict[str, object]:
    doc = scenario_doc()
    doc["expect"] = {
        "failure": "silent",
        "probes": [{"kind": "inference", "prompt": "Say OK.", "expect": "unavailable"}],
        "time_to_fail": {"max_s": 60},
    }
    doc["recover"] = [
        {
            "name": "Lower the utilisation",
            "outcome": "masks",
            "why": "a smaller buffer hides it",
            "actions": [
                {"kind": "set_args", "node": "serving", "args": {"--gpu-memory-utilization": "0.2"}}
            ],
            "reveal": [
                {"kind": "set_args", "node": "serving", "args": {"--gpu-memory-utilization": "0.9"}}
            ],
        },
        {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]},
    ]
    return doc


def test_a_masking_step_passes_the_probes_then_the_fault_is_back(tmp_path: Path) -> None:
    from runner.labs.fake import Hangs, Serves

    def script(_n: str, c: object) -> object:
        args = getattr(c, "args", ())
        return Hangs() if "99999" in args and "0.2" not in args else Serves()

    result = fake_run(tmp_path, masking_doc(), script).run()  # type: ignore[arg-type]
    names = by_name(result)
    label = "recover 1: Lower the utilisation"
    assert names[f"{label}: masks the symptom (the probes pass)"] is Verdict.PASSED
    assert (
        names[f"{label}: masks, the fault is back once the original setting is restored"]
        is Verdict.PASSED
    )
    assert names["recover 2: Roll back: restores service"] is Verdict.PASSED
    assert result.verdict is Verdict.PASSED
    assert [n for n in result.notes if n.startswith("MASKS")] == [
        "MASKS - Lower the utilisation: the probes passed after it and the fault came back once "
        "the original setting was restored; it hides the symptom, the cause is still there"
    ]


def test_a_step_said_to_mask_that_really_fixes_fails(tmp_path: Path) -> None:
    from runner.labs.fake import Hangs, Serves

    fixed: list[bool] = []

    def script(_n: str, c: object) -> object:
        args = getattr(c, "args", ())
        if "0.2" in args:
            fixed.append(True)
        return Hangs() if "99999" in args and not fixed else Serves()

    doc = masking_doc()
    doc["expect"]["time_to_fail"] = {"max_s": 5}  # type: ignore[index]
    result = fake_run(tmp_path, doc, script).run()  # type: ignore[arg-type]
    names = by_name(result)
    back = (
        "recover 1: Lower the utilisation: masks, the fault is back once the original setting is "
        "restored"
    )
    assert names[back] is Verdict.FAILED
    assert result.verdict is Verdict.FAILED
    assert [n for n in result.notes if n.startswith("MASKS")] == []


def test_reveal_belongs_to_a_masking_step_only(tmp_path: Path) -> None:
    from runner.errors import ScenarioError

    doc = masking_doc()
    doc["recover"][0]["reveal"] = []  # type: ignore[index]
    with pytest.raises(ScenarioError, match="reveal: is what a step that `masks` needs"):
        fake_run(tmp_path, doc)


def test_a_masking_step_needs_the_expectations_probes(tmp_path: Path) -> None:
    from runner.errors import ScenarioError

    doc = scenario_doc()
    doc["recover"] = masking_doc()["recover"]
    with pytest.raises(ScenarioError, match=r"expect\.probes must not be empty"):
        fake_run(tmp_path, doc)


def test_a_crash_loop_is_seen_in_the_events_when_the_sample_reads_running() -> None:
    """Docker's restart policy waits 100 ms, then 200 ms: a compose node is `restarting` only
    between two samples. Its failed exits and restarts since the injection still say it is
    crash-looping; one failure, or a node that is not restarted, does not."""
    from datetime import UTC, datetime

    from runner.labs.base import EventType, ExitInfo, LabEvent, NodeState
    from runner.run.phases.expect import in_state
    from runner.spec.expectations import StateExpectation
    from runner.spec.kinds import NodeStatus

    t = datetime(2026, 12, 1, tzinfo=UTC)

    def exited(seq: int, inc: int) -> LabEvent:
        info = ExitInfo(incarnation=inc, code=1, started_at=t, first_output_at=t, finished_at=t)
        return LabEvent(seq=seq, ts=t, node="serving", type=EventType.EXITED, exit=info)

    def state(status: NodeStatus, restarts: int) -> NodeState:
        return NodeState(
            name="serving", status=status, generation=1, incarnation=3, restarts=restarts,
            ready=False,
        )  # fmt: skip

    want = StateExpectation(status=NodeStatus.CRASH_LOOPING, min_restarts=1)
    two = [exited(1, 1), exited(2, 2)]
    assert in_state(want, state(NodeStatus.CRASH_LOOPING, 1), []) == ""
    assert in_state(want, state(NodeStatus.RUNNING, 2), two) == (
        "crash_looping in the lab's events (2 failed exits since the injection, 2 restarts by "
        "the restart policy)"
    )
    assert in_state(want, state(NodeStatus.RUNNING, 1), two[:1]) is None
    assert in_state(want, state(NodeStatus.EXITED, 0), two) is None
    backoff = LabEvent(seq=3, ts=t, node="serving", type=EventType.BACKOFF, restarts=1)
    assert in_state(want, state(NodeStatus.RUNNING, 1), [two[0], backoff]) == (
        "crash_looping in the lab's events (a back-off at restarts 1)"
    )
    stopped = StateExpectation(status=NodeStatus.EXITED, max_restarts=0)
    assert in_state(stopped, state(NodeStatus.RUNNING, 2), two) is None


def test_a_recovery_step_is_judged_by_failures_after_it() -> None:
    """A crash-looping node's exit from before the step, read only after it (events arrive
    late), is the fault's: the step is judged by an incarnation started since, or an exit of the
    running one after the step began where that one was serving."""
    from datetime import UTC, datetime, timedelta

    from runner.labs.base import EventType, ExitInfo, LabEvent
    from runner.run.phases.recover import Before

    t = datetime(2026, 12, 1, 22, 17, 29, tzinfo=UTC)

    def exited(inc: int, at: datetime, stopped: bool = False) -> LabEvent:
        info = ExitInfo(incarnation=inc, code=1, started_at=at, first_output_at=at, finished_at=at)
        return LabEvent(
            seq=inc, ts=at, node="serving", type=EventType.EXITED, exit=info, stopped=stopped
        )

    before = Before(incarnation=4, at=t)
    late = exited(4, t - timedelta(seconds=0.8))
    assert before.failed_after([late]) is None
    assert before.failed_after([late, exited(5, t + timedelta(seconds=0.3), stopped=True)]) is None
    step_failure = before.failed_after([late, exited(6, t + timedelta(seconds=3))])
    assert step_failure is not None and step_failure.incarnation == 6
    running = before.failed_after([exited(4, t + timedelta(seconds=1))])  # no restart needed
    assert running is not None and running.incarnation == 4
    # a crash-looping node's running incarnation that crashes while the step is applied
    looping = Before(incarnation=4, at=t, serving=False)
    assert looping.failed_after([exited(4, t + timedelta(seconds=0.01))]) is None
    step_failure = looping.failed_after([exited(4, t), exited(5, t + timedelta(seconds=8))])
    assert step_failure is not None and step_failure.incarnation == 5
