"""A person's actions from lab events (runner.drill.recognise), and their match to the steps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from runner.drill.recognise import Configs, Recogniser, config_diff, match, together_groups
from runner.labs.base import EventType, LabEvent, NodeConfig
from runner.results.drill_record import ActionKind, ObservedAction
from runner.spec.expectations import RecoveryStep
from runner.spec.kinds import Outcome, RestartPolicy

T0 = datetime(2026, 11, 30, tzinfo=UTC)
BASE = NodeConfig(args=("m", "--port", "8000"), env={"HF_TOKEN": "hf_secret", "A": "1"})
NODES = ("node1", "node2", "node3")
GROUPS = {"tp_group": ["node1", "node2", "node3"]}


def ev(seq: int, node: str, type_: EventType, **kw: Any) -> LabEvent:
    return LabEvent(seq=seq, ts=T0, node=node, type=type_, **kw)


def stopped(seq: int, node: str, incarnation: int = 1) -> LabEvent:
    from runner.labs.base import ExitInfo

    exit_ = ExitInfo(
        incarnation=incarnation, code=0, started_at=T0, first_output_at=T0, finished_at=T0
    )
    return ev(seq, node, EventType.EXITED, exit=exit_, stopped=True)


def recogniser(groups: list[frozenset[str]] | None = None) -> Recogniser:
    return Recogniser(
        configs=dict.fromkeys(NODES, BASE),
        generations=dict.fromkeys(NODES, 1),
        groups=groups or [],
        window_s=2.0,
    )


def resolve(name: str) -> list[str]:
    return GROUPS.get(name, [name])


def test_a_stop_and_start_with_the_same_config_is_a_restart_once_the_window_passes() -> None:
    r = recogniser()
    assert r.feed(stopped(1, "node1"), 10.0, None) == []
    assert r.feed(ev(2, "node1", EventType.STARTED, generation=1), 10.5, BASE) == []
    assert r.tick(12.0) == []
    assert r.tick(12.5) == [
        ObservedAction(at_s=10.5, kind=ActionKind.RESTART, nodes=("node1",), detail="restarted")
    ]


def test_restarts_of_several_nodes_each_within_the_window_are_one_group_restart() -> None:
    r = recogniser()
    for i, n in enumerate(NODES):
        r.feed(stopped(i + 1, n), 10.0, None)
    for i, n in enumerate(NODES):
        assert r.feed(ev(10 + i, n, EventType.STARTED), 10.2 + i / 10, BASE) == []
    assert r.tick(12.3) == []  # 1.9 s after the last of them
    assert r.tick(12.4) == [
        ObservedAction(
            at_s=10.2,
            kind=ActionKind.GROUP_RESTART,
            nodes=NODES,
            detail="3 nodes restarted together",
        )
    ]


def test_all_the_nodes_of_a_restart_step_are_recognised_at_once() -> None:
    r = recogniser(groups=[frozenset(NODES)])
    out: list[ObservedAction] = []
    for i, n in enumerate(NODES):
        out += r.feed(stopped(i + 1, n), 10.0, None)
        out += r.feed(ev(10 + i, n, EventType.STARTED), 10.1, BASE)
    assert [(a.kind, a.nodes) for a in out] == [(ActionKind.GROUP_RESTART, NODES)]


def test_a_start_of_a_node_that_exited_by_itself_is_a_restart_but_its_policy_s_is_not() -> None:
    r = recogniser()
    # the head exited 0 on its own; `gameday lab restart node1` starts it in a new generation
    assert r.feed(ev(1, "node1", EventType.STARTED, generation=2), 5.0, BASE) == []
    # node2's restart policy: a back-off, then a start in the same generation
    r.feed(ev(2, "node2", EventType.BACKOFF, delay_s=1.0, restarts=1), 5.1, None)
    r.feed(ev(3, "node2", EventType.STARTED, generation=1), 5.2, BASE)
    assert [(a.kind, a.nodes) for a in r.tick(7.0)] == [(ActionKind.RESTART, ("node1",))]


def test_a_new_configuration_is_a_config_change_with_secrets_masked() -> None:
    r = recogniser()
    new = NodeConfig(
        args=("m", "--port", "8000", "--max-model-len", "4096"),
        env={"HF_TOKEN": "hf_other", "A": "1"},
    )
    r.feed(stopped(1, "node2"), 3.0, None)
    r.feed(ev(2, "node2", EventType.APPLIED, generation=2), 3.1, None)
    out = r.feed(ev(3, "node2", EventType.STARTED, generation=2), 3.2, new)
    assert out == [
        ObservedAction(
            at_s=3.2,
            kind=ActionKind.CONFIG_CHANGE,
            nodes=("node2",),
            detail="args: m --port 8000 -> m --port 8000 --max-model-len 4096; "
            "env: HF_TOKEN: <redacted> -> <redacted>",
        )
    ]


def test_a_node_stopped_and_not_started_is_a_stop_then_its_start_is_a_start() -> None:
    r = recogniser()
    r.feed(stopped(1, "node3"), 1.0, None)
    assert r.tick(2.5) == []
    assert r.tick(3.0) == [
        ObservedAction(at_s=1.0, kind=ActionKind.STOP, nodes=("node3",), detail="stopped")
    ]
    out = r.feed(ev(2, "node3", EventType.STARTED, generation=2), 9.0, BASE)
    assert out == [
        ObservedAction(at_s=9.0, kind=ActionKind.START, nodes=("node3",), detail="started")
    ]


def test_a_process_stopped_beside_the_engine() -> None:
    out = recogniser().feed(ev(1, "node1", EventType.AUX_STOPPED, name="omniparser"), 4.0, None)
    assert out == [
        ObservedAction(
            at_s=4.0,
            kind=ActionKind.PROCESS_STOPPED,
            nodes=("node1",),
            detail="process omniparser stopped",
        )
    ]


def test_config_diff_without_a_change() -> None:
    assert config_diff(BASE, BASE) == "re-applied, no change"


# ---- matching ----

STEPS = [
    RecoveryStep.model_validate(s)
    for s in (
        {
            "name": "Restart the head alone",
            "outcome": "does_not_restore",
            "why": "the workers never rejoin",
            "actions": [{"kind": "restart", "nodes": ["node1"]}],
        },
        {
            "name": "Raise max-model-len",
            "outcome": "restores",
            "forbidden": "it hides the real limit",
            "actions": [{"kind": "set_args", "node": "node2", "args": {"--max-model-len": 4096}}],
        },
        {
            "name": "Roll back",
            "outcome": "restores",
            "actions": [{"kind": "rollback"}],
        },
        {
            "name": "Restart the group",
            "outcome": "restores",
            "actions": [{"kind": "restart", "nodes": ["tp_group"], "together": True}],
        },
        {
            "name": "Stop the stray",
            "outcome": "restores",
            "actions": [{"kind": "stop_process", "node": "node1", "name": "omniparser"}],
        },
    )
]


def act(kind: ActionKind, *nodes: str, detail: str = "") -> ObservedAction:
    return ObservedAction(at_s=1.0, kind=kind, nodes=nodes, detail=detail)


def configs(current: NodeConfig) -> Configs:
    return Configs(baseline=dict.fromkeys(NODES, BASE), current=dict.fromkeys(NODES, current))


def test_a_head_only_restart_is_the_shortcut_with_its_why() -> None:
    m = match(act(ActionKind.RESTART, "node1"), STEPS, resolve, configs(BASE))
    assert (m.step, m.outcome, m.shortcut, m.why) == (
        "Restart the head alone",
        Outcome.DOES_NOT_RESTORE,
        True,
        "the workers never rejoin",
    )


def test_a_group_restart_matches_the_group_step() -> None:
    m = match(act(ActionKind.GROUP_RESTART, *NODES), STEPS, resolve, configs(BASE))
    assert (m.step, m.shortcut, m.why) == ("Restart the group", False, "")


def test_a_config_change_with_the_step_s_values_matches_a_forbidden_step() -> None:
    raised = NodeConfig(args=(*BASE.args, "--max-model-len", "4096"), env=BASE.env)
    m = match(act(ActionKind.CONFIG_CHANGE, "node2"), STEPS, resolve, configs(raised))
    assert (m.step, m.shortcut, m.why) == ("Raise max-model-len", True, "it hides the real limit")


def test_a_config_change_back_to_the_baseline_is_a_rollback() -> None:
    m = match(act(ActionKind.CONFIG_CHANGE, "node3"), STEPS, resolve, configs(BASE))
    assert (m.step, m.shortcut) == ("Roll back", False)


def test_a_config_change_to_something_else_matches_no_step() -> None:
    other = NodeConfig(args=(*BASE.args, "--max-model-len", "999"), env=BASE.env)
    m = match(act(ActionKind.CONFIG_CHANGE, "node2"), STEPS, resolve, configs(other))
    assert (m.step, m.shortcut) == (None, False)


def test_a_stopped_process_matches_by_name() -> None:
    a = act(ActionKind.PROCESS_STOPPED, "node1", detail="process omniparser stopped")
    assert match(a, STEPS, resolve, configs(BASE)).step == "Stop the stray"
    b = act(ActionKind.PROCESS_STOPPED, "node1", detail="process other stopped")
    assert match(b, STEPS, resolve, configs(BASE)).step is None


def test_together_groups_are_the_restart_steps_of_several_nodes() -> None:
    assert together_groups(STEPS, resolve) == [frozenset(NODES)]


def test_flush_recognises_a_pending_restart_before_its_window_ends() -> None:
    r = recogniser()
    r.feed(stopped(1, "node2"), 1.0, None)
    r.feed(ev(2, "node2", EventType.STARTED), 1.1, BASE)
    assert r.flush(1.2) == [
        ObservedAction(at_s=1.1, kind=ActionKind.RESTART, nodes=("node2",), detail="restarted")
    ]


def test_a_deleted_pod_s_replacement_started_before_its_stop_is_one_restart() -> None:
    r = Recogniser(
        configs=dict.fromkeys(NODES, BASE),
        generations=dict.fromkeys(NODES, 1),
        incarnations=dict.fromkeys(NODES, 1),
    )
    assert r.feed(ev(1, "node1", EventType.STARTED, incarnation=2, pod="p-2"), 1.0, BASE) == []
    assert r.feed(stopped(2, "node1", incarnation=1), 1.3, None) == []
    assert r.tick(5.0) == [
        ObservedAction(at_s=1.0, kind=ActionKind.RESTART, nodes=("node1",), detail="restarted")
    ]


def failed(seq: int, node: str, code: int, incarnation: int = 1) -> LabEvent:
    from runner.labs.base import ExitInfo

    exit_ = ExitInfo(
        incarnation=incarnation, code=code, started_at=T0, first_output_at=T0, finished_at=T0
    )
    return ev(seq, node, EventType.EXITED, exit=exit_)


@pytest.mark.parametrize(
    ("policy", "code", "actions"),
    [
        # the kubelet restarts a first crash at once, with no back-off announced: its own doing
        (RestartPolicy.ALWAYS, 1, []),
        (RestartPolicy.ON_FAILURE, 1, []),
        # exit 0 under on-failure, or no policy: nothing restarts it but a person
        (RestartPolicy.ON_FAILURE, 0, [(ActionKind.RESTART, ("node1",))]),
        (RestartPolicy.NO, 1, [(ActionKind.RESTART, ("node1",))]),
    ],
)
def test_a_start_after_a_failure_its_policy_restarts_is_not_a_persons(
    policy: RestartPolicy, code: int, actions: list[tuple[ActionKind, tuple[str, ...]]]
) -> None:
    r = Recogniser(
        configs=dict.fromkeys(NODES, BASE),
        generations=dict.fromkeys(NODES, 1),
        incarnations=dict.fromkeys(NODES, 1),
        policies=dict.fromkeys(NODES, policy),
        window_s=2.0,
    )
    assert r.feed(failed(1, "node1", code), 1.0, None) == []
    assert r.feed(ev(2, "node1", EventType.STARTED, incarnation=2), 1.1, BASE) == []
    got = r.tick(5.0)
    assert [(a.kind, a.nodes) for a in got] == actions


@pytest.mark.parametrize(("restarting", "actions"), [(True, []), (False, [ActionKind.RESTART])])
def test_a_crash_loop_under_way_at_the_hand_over_restarts_by_its_policy(
    restarting: bool, actions: list[ActionKind]
) -> None:
    """The failure that started the loop came before anyone watched: its next start is the
    policy's, not a person's restart (the shortcut a drill would score)."""
    r = Recogniser(
        configs=dict.fromkeys(NODES, BASE),
        generations=dict.fromkeys(NODES, 1),
        incarnations=dict.fromkeys(NODES, 3),
        policies=dict.fromkeys(NODES, RestartPolicy.ALWAYS),
        restarting=frozenset({"node1"}) if restarting else frozenset(),
        window_s=2.0,
    )
    assert r.feed(ev(1, "node1", EventType.STARTED, incarnation=4), 1.0, BASE) == []
    assert [a.kind for a in r.tick(5.0)] == actions
    # after it, the loop is seen whole: the next crash and start are the policy's too
    assert r.feed(failed(2, "node1", 1), 6.0, None) == []
    assert r.feed(ev(3, "node1", EventType.STARTED, incarnation=5), 6.5, BASE) == []
    assert r.tick(10.0) == []


def test_a_start_stamped_before_the_hand_over_is_not_a_persons_unless_it_changes_the_config() -> (
    None
):
    from datetime import timedelta

    r = Recogniser(
        configs=dict.fromkeys(NODES, BASE),
        generations=dict.fromkeys(NODES, 1),
        incarnations=dict.fromkeys(NODES, 1),
        since=T0 + timedelta(seconds=1),
        window_s=2.0,
    )
    # the policy's restart after a crash just before the hand-over, reported after it
    assert r.feed(ev(1, "node1", EventType.STARTED, incarnation=2), 0.1, BASE) == []
    assert r.tick(5.0) == []
    # a new configuration, stamped in the same whole second: someone's change all the same
    other = BASE.model_copy(update={"args": (*BASE.args, "--enforce-eager")})
    got = r.feed(ev(2, "node2", EventType.STARTED, incarnation=2), 0.2, other)
    assert [(a.kind, a.nodes) for a in got] == [(ActionKind.CONFIG_CHANGE, ("node2",))]


def test_the_starts_no_person_made_are_kept_with_who_made_them() -> None:
    from datetime import timedelta

    from runner.results.drill_record import Actor

    r = Recogniser(
        configs=dict.fromkeys(NODES, BASE),
        generations=dict.fromkeys(NODES, 1),
        incarnations=dict.fromkeys(NODES, 1),
        policies=dict.fromkeys(NODES, RestartPolicy.ALWAYS),
        since=T0 + timedelta(seconds=1),
        window_s=2.0,
    )
    # gameday's own start, stamped before the hand-over and reported after it
    assert r.feed(ev(1, "node2", EventType.STARTED, incarnation=2), 0.1, BASE) == []
    assert r.feed(failed(2, "node1", 1), 3.0, None) == []
    assert r.feed(ev(3, "node1", EventType.STARTED, incarnation=2), 3.1, BASE) == []
    assert [(a.nodes, a.actor, a.at_s) for a in r.take_others()] == [
        (("node2",), Actor.RUNNER, 0.1),
        (("node1",), Actor.RESTART_POLICY, 3.1),
    ]
    assert r.take_others() == []
