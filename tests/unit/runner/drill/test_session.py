"""A drill on the fake lab (runner.drill.session): the hand-over, a scripted person's actions,
the shortcut flagged at once, recovery, hints and acknowledgement, timeout and giving up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from runner.drill.bus import Request, read_status
from runner.drill.model import DrillPhase, DrillStatus, EventKind
from runner.drill.session import Drill, DrillOptions, drill_folder
from runner.labs.base import Change, ChangeKind
from runner.results.drill_record import ActionKind, Actor
from runner.results.schema import DrillOutcome, ScenarioResult, Verdict
from runner.run.journal import Journal
from tests.support.fakelab import FakeRun, fake_run, scenario_doc, wrong_flag

Person = Callable[[Drill], None]


def drill_of(run: FakeRun, **options: Any) -> Drill:
    opts = DrillOptions(**{"tick_s": 0.05, "window_s": 0.2, **options})
    journal = Journal(run.lab.state_dir, "drill-1")
    http = httpx.Client(transport=run.lab.transport)
    return Drill(run.ls, run.lab, journal, run.progress.append, http=http, options=opts)


def handed_over(d: Drill, timeout: float = 60.0) -> DrillStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = d.bus.status
        if st.phase is DrillPhase.HANDED_OVER:
            return st
        time.sleep(0.01)
    raise AssertionError(f"not handed over: {d.bus.status.phase}")


def drilled(run: FakeRun, person: Person, **options: Any) -> tuple[Drill, ScenarioResult]:
    d = drill_of(run, **options)
    errors: list[BaseException] = []

    def act() -> None:
        try:
            handed_over(d)
            person(d)
        except BaseException as exc:  # the test's assertion, reported by the main thread
            errors.append(exc)
            d.bus.request(Request.GIVE_UP)

    t = threading.Thread(target=act)
    t.start()
    result = d.run()
    t.join(60)
    if errors:
        raise errors[0]
    return d, result


def rollback(d: Drill) -> None:
    lab = d.lab
    base = lab.baseline_config("serving")
    lab.apply(
        Change(
            kind=ChangeKind.NODE_CONFIG, node="serving", before=lab.config("serving"), after=base
        )
    )


def wait_for_action(d: Drill, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(d.bus.status.actions) < n:
        assert time.monotonic() < deadline, f"actions: {d.bus.status.actions}"
        time.sleep(0.01)


def test_a_shortcut_is_flagged_at_once_then_a_rollback_recovers(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())

    def person(d: Drill) -> None:
        d.lab.restart(["serving"])  # the shortcut: the flag is still wrong
        wait_for_action(d, 1)
        shortcut = d.bus.status.actions[0]
        assert (shortcut.kind, shortcut.step, shortcut.shortcut, shortcut.why) == (
            ActionKind.RESTART,
            "Restart and hope",
            True,
            "the flag is still wrong",
        )
        assert [e.text for e in d.bus.events() if e.kind is EventKind.ACTION] == [
            "shortcut: Restart and hope: the flag is still wrong"
        ]
        assert d.bus.status.phase is DrillPhase.HANDED_OVER  # not recovered by the shortcut
        rollback(d)

    d, result = drilled(run, person)
    assert result.drill is not None
    assert result.drill.outcome is DrillOutcome.RECOVERED
    assert [(a.kind, a.step, a.shortcut) for a in result.drill.actions] == [
        (ActionKind.RESTART, "Restart and hope", True),
        (ActionKind.CONFIG_CHANGE, "Roll back", False),
    ]
    assert [a.step for a in result.drill.shortcuts] == ["Restart and hope"]
    first, second = result.drill.actions
    assert 0 < first.at_s <= second.at_s <= result.drill.time_to_recover_s  # type: ignore[operator]
    assert result.verdict is Verdict.PASSED
    assert [a.name for a in result.assertions if a.name.startswith("drill")] == [
        "drill: time to recover"
    ]
    # no recovery step was run by gameday: the lab saw the person's restart and re-apply only,
    # then cleanup's undo of the injected flag
    assert run.lab.restarted == [["serving"]]
    assert [p.phase for p in [d.bus.status]] == [DrillPhase.DONE]
    on_disk = read_status(drill_folder(run.lab))
    assert on_disk is not None and on_disk.phase is DrillPhase.DONE
    assert on_disk.recovered_at_s == result.drill.time_to_recover_s
    assert run.open_changes() == 0


def test_hints_by_delay_and_on_request_and_the_first_ack(tmp_path: Path) -> None:
    doc = scenario_doc(
        hints=[
            {"text": "look at the flags", "after_s": 0},
            {"text": "roll back the change"},
            {"text": "never asked for", "after_s": 3600},
        ]
    )
    run = fake_run(tmp_path, doc, wrong_flag())
    answers: list[str] = []

    def person(d: Drill) -> None:
        deadline = time.monotonic() + 60
        while not d.bus.status.hints:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        answers.append(d.bus.request(Request.HINT))
        answers.append(d.bus.request(Request.ACK))
        answers.append(d.bus.request(Request.ACK).split(" at ")[0])
        answers.append(d.bus.request(Request.HINT))
        answers.append(d.bus.request(Request.HINT))
        answers.append(d.bus.request(Request.GIVE_UP))

    d, result = drilled(run, person)
    assert answers[0] == "hint 2: roll back the change"
    assert answers[1].startswith("acknowledged at ")
    assert answers[2:] == [
        "already acknowledged",
        "hint 3: never asked for",
        "no hints left",
        "giving up: the drill cleans up to the baseline",
    ]
    assert result.drill is not None
    assert [(h.index, h.requested) for h in result.drill.hints] == [
        (1, False),
        (2, True),
        (3, True),
    ]
    assert result.drill.time_to_acknowledge_s == d.bus.status.acked_at_s
    assert result.drill.time_to_acknowledge_s is not None
    # the zero of the drill's times, kept so the report's picture can place them
    assert result.drill.fault_at is not None and result.drill.fault_at == d.fault_at
    assert result.drill.handed_over_at is not None
    assert result.started_at <= result.drill.fault_at <= result.drill.handed_over_at
    assert result.drill.outcome is DrillOutcome.GAVE_UP
    assert result.verdict is Verdict.FAILED
    assert d.bus.status.hints_left == 0


def test_a_timeout_fails_the_drill_and_cleans_up_to_the_baseline(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    _d, result = drilled(run, lambda _d: None, timeout_s=0.3)
    assert result.drill is not None and result.drill.outcome is DrillOutcome.TIMED_OUT
    drill_check = [a for a in result.assertions if a.name == "drill: time to recover"]
    assert [(a.verdict, a.observed) for a in drill_check] == [
        (Verdict.FAILED, "not recovered: timed out after 0.3 s wall")
    ]
    assert result.verdict is Verdict.FAILED
    assert run.lab.config("serving") == run.lab.baseline_config("serving")
    assert run.lab.states()["serving"].ready is True
    assert run.open_changes() == 0


def test_a_request_before_the_hand_over_is_answered_not_taken(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    d = drill_of(run)
    assert d.bus.request(Request.ACK) == "the drill is not handed over (phase baseline)"


def test_a_failure_that_does_not_show_is_an_error_with_nothing_handed_over(
    tmp_path: Path,
) -> None:
    run = fake_run(tmp_path, scenario_doc())  # the node serves whatever its flags
    d = drill_of(run)
    result = d.run()
    assert result.drill is not None and result.drill.outcome is DrillOutcome.ERROR
    assert result.drill.handed_over_at is None
    assert result.verdict is Verdict.ERROR
    assert [e.data["phase"] for e in d.bus.events() if e.kind is EventKind.PHASE] == [
        "baseline",
        "inject",
        "expect",
        "error",
        "cleanup",
        "done",
    ]


def test_the_clock_moves_in_status_json_while_people_work(tmp_path: Path) -> None:
    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    clocks: list[float] = []

    def on_disk() -> DrillStatus | None:
        # status.json is the bus's snapshot as last written: the handover's in-memory phase can
        # be ahead of it for a moment on a loaded machine
        deadline = time.monotonic() + 10
        st = read_status(drill_folder(run.lab))
        while (st is None or st.clock_s is None) and time.monotonic() < deadline:
            time.sleep(0.05)
            st = read_status(drill_folder(run.lab))
        return st

    def person(d: Drill) -> None:
        for _ in range(2):
            st = on_disk()
            assert st is not None and st.clock_s is not None
            clocks.append(st.clock_s)
            time.sleep(1.2)
        d.bus.request(Request.GIVE_UP)

    drilled(run, person, tick_s=1.0)
    assert clocks[1] - clocks[0] >= 0.5


def head_only_restart_doc() -> dict[str, Any]:
    """The head-only-restart lesson on the fake lab's tp_group (node1 head, node2 worker)."""
    health = {"kind": "http", "path": "/health", "node": "node1"}
    return scenario_doc(
        target="node1",
        baseline={"probes": [health]},
        inject=[{"kind": "signal", "node": "node1", "process": "engine_core", "signal": "KILL"}],
        expect={
            "signature": {"source": "previous", "in_order": [{"regex": "EngineDeadError"}]},
            "exit_code": 0,
            "time_to_fail": {"max_s": 600},
        },
        recover=[
            {
                "name": "Restart the head alone",
                "outcome": "does_not_restore",
                "why": "the workers never rejoin a new head",
                "actions": [{"kind": "restart", "nodes": ["node1"]}],
            },
            {
                "name": "Restart the group together",
                "outcome": "restores",
                "actions": [{"kind": "restart", "nodes": ["tp_group"], "together": True}],
            },
        ],
        verify={"probes": [health], "time_to_recover": {"max_s": 1800}},
    )


def test_the_head_alone_is_a_shortcut_and_the_group_together_recovers(tmp_path: Path) -> None:
    from runner.labs.fake import Exits, Serves

    broken = {"head": False, "together": False}

    def script(node: str, _config: object) -> object:
        if node == "node1" and broken["head"] and not broken["together"]:
            return Exits(code=0, logs=("EngineDeadError: EngineCore encountered an issue",))
        return Serves()

    run = fake_run(tmp_path, head_only_restart_doc(), script)  # type: ignore[arg-type]
    real_signal, real_restart = run.lab.signal, run.lab.restart

    def signal(node: str, process: str, sig: str) -> None:
        broken["head"] = True
        real_signal(node, process, sig)

    def restart(nodes: Any) -> None:
        broken["together"] = set(nodes) == {"node1", "node2"}
        real_restart(nodes)

    run.lab.signal = signal  # type: ignore[method-assign]
    run.lab.restart = restart  # type: ignore[method-assign]

    def person(d: Drill) -> None:
        d.lab.restart(["node1"])
        wait_for_action(d, 1)
        assert d.bus.status.actions[0].shortcut is True
        d.lab.restart(["node1", "node2"])

    d, result = drilled(run, person)
    assert result.drill is not None and result.drill.outcome is DrillOutcome.RECOVERED
    assert [(a.kind, a.nodes, a.step, a.shortcut, a.why) for a in result.drill.actions] == [
        (
            ActionKind.RESTART,
            ("node1",),
            "Restart the head alone",
            True,
            "the workers never rejoin a new head",
        ),
        (ActionKind.GROUP_RESTART, ("node1", "node2"), "Restart the group together", False, ""),
    ]
    assert result.verdict is Verdict.PASSED, [
        (a.name, a.observed) for a in result.assertions if a.verdict is not Verdict.PASSED
    ]
    assert [e.text for e in d.bus.events() if e.kind is EventKind.ACTION] == [
        "shortcut: Restart the head alone: the workers never rejoin a new head",
        "group_restart node1, node2: 2 nodes restarted together (step: Restart the group together)",
    ]


def test_a_verbs_action_seen_within_a_millisecond_of_its_begin_is_the_verbs(
    tmp_path: Path,
) -> None:
    """The drill clock keeps milliseconds, rounded: an action seen 50 µs after a verb began, at
    a moment the reading rounds down to 0.45 ms earlier, is still the verb's. (On the fake lab a
    restart is seen that soon: the reading fell before the verb's begin about once in twenty
    runs on a loaded machine.)"""
    from runner.drill import verb_log
    from runner.results.drill_record import ObservedAction

    run = fake_run(tmp_path, scenario_doc(), wrong_flag())
    d = drill_of(run)
    with verb_log.acting(run.lab.state_dir, "restart", ["serving"]):
        (begin,) = [r.begin for r in verb_log.read(run.lab.state_dir)]
    seen = begin + timedelta(microseconds=50)
    d.fault_at = seen - timedelta(seconds=1, microseconds=450)  # read as 1.000 s
    d._actions(
        [ObservedAction(at_s=1.0, kind=ActionKind.RESTART, nodes=("serving",), detail="restarted")]
    )
    assert [a.actor for a in d.actions] == [Actor.LAB_VERB]
    assert d.latest_moment(1.0) >= seen
    # an action seen before the verb began is not the verb's
    d.fault_at = begin - timedelta(seconds=1, microseconds=600)  # 1.000 s: by 0.1 ms before it
    d._actions(
        [ObservedAction(at_s=1.0, kind=ActionKind.RESTART, nodes=("serving",), detail="restarted")]
    )
    assert [a.actor for a in d.actions] == [Actor.LAB_VERB, Actor.OUTSIDE_TOOL]


def test_who_acted_is_recorded_and_only_people_are_scored(tmp_path: Path) -> None:
    """A `gameday lab` verb's restart (marked as the verb marks it: test_lab_verbs checks that
    it does), another tool's restart and the restart policy's crash loop after each: the first
    two are people's (scored, each with its tool), the loop's restarts are the policy's
    (recorded, never scored), folded on the page into one line."""
    from runner.drill import verb_log
    from runner.drill.views import lines

    run = fake_run(tmp_path, scenario_doc(), wrong_flag(restarts=3))
    looping: list[bool] = []

    def person(d: Drill) -> None:
        d.lab.restart(["serving"])  # docker restart, as gameday sees it: by its effect
        wait_for_action(d, 1)
        looping.append(next(n for n in d.bus.status.nodes if n.name == "serving").crash_looping)
        with verb_log.acting(run.lab.state_dir, "restart", ["serving"]):
            d.lab.restart(["serving"])
        wait_for_action(d, 2)
        rollback(d)  # another tool's change, within seconds of the verb's restart

    d, result = drilled(run, person)
    drill = result.drill
    assert drill is not None and drill.outcome is DrillOutcome.RECOVERED
    assert [(a.kind, a.actor, a.step) for a in drill.actions] == [
        (ActionKind.RESTART, Actor.OUTSIDE_TOOL, "Restart and hope"),
        (ActionKind.RESTART, Actor.LAB_VERB, "Restart and hope"),
        (ActionKind.CONFIG_CHANGE, Actor.OUTSIDE_TOOL, "Roll back"),
    ]
    assert [a.actor for a in drill.shortcuts] == [Actor.OUTSIDE_TOOL, Actor.LAB_VERB]
    # each person's restart ran into the crash loop: three restarts by the policy each time
    assert [(a.kind, a.nodes, a.actor, a.step) for a in drill.not_people] == [
        (ActionKind.RESTART, ("serving",), Actor.RESTART_POLICY, None)
    ] * 6
    assert looping == [True]
    assert not next(n for n in d.bus.status.nodes if n.name == "serving").crash_looping
    loops = [line.text for line in lines(d.bus.events()) if "crashed" in line.text]
    assert loops == ["serving crashed and restarted ×3, crashed again (restart policy)"] * 2
    on_disk = ScenarioResult.model_validate_json(result.model_dump_json())
    assert on_disk.drill is not None and on_disk.drill.not_people == drill.not_people
