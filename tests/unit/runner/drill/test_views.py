"""The two views of a drill's page (runner.drill.views): what the responder may read before the
end, and the event list with a node's crash loop folded into one line with a count."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runner.drill.model import DrillEvent, DrillPhase, DrillStatus, EventKind
from runner.drill.views import Lines, View, event_for, lines, status_for
from runner.results.drill_record import ActionKind, Actor, ObservedAction

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
FIX = ObservedAction(
    at_s=30.0,
    kind=ActionKind.CONFIG_CHANGE,
    nodes=("serving",),
    detail="args: --max-model-len 99999 -> --max-model-len 4096",
    step="Lower max-model-len",
    why="the KV cache holds 4096 tokens",
    actor=Actor.LAB_VERB,
)


def status(phase: DrillPhase) -> DrillStatus:
    return DrillStatus(
        scenario="kv-cache-shortage",
        title="The KV cache is too small",
        lab="local",
        phase=phase,
        started_at=T0,
        timeline=("inject: set_args serving --max-model-len 99999",),
        actions=(FIX,),
    )


seq = iter(range(1, 1000))


def event(kind: EventKind, text: str, at_s: float | None, **data: Any) -> DrillEvent:
    return DrillEvent(seq=next(seq), ts=T0, at_s=at_s, kind=kind, text=text, data=data)


def loop(at_s: float, crashes: int = 1, restarts: int = 1, node: str = "serving") -> DrillEvent:
    counts = {"crashes": crashes, "restarts": restarts}
    return event(
        EventKind.NODE,
        f"{node} exited, {node} started",
        at_s,
        node=node,
        actor="restart_policy",
        crash_loop=counts,
    )


def test_the_responder_reads_neither_the_scenario_nor_the_answer_until_the_end() -> None:
    live = status(DrillPhase.HANDED_OVER)
    mine = status_for(View.RESPONDER, live)
    assert (mine.scenario, mine.title, mine.timeline) == ("", "gameday drill", ())
    assert [(a.step, a.outcome, a.why, a.actor) for a in mine.actions] == [
        (None, None, "", Actor.LAB_VERB)
    ]
    assert status_for(View.FACILITATOR, live) == live
    for ended in (DrillPhase.RECOVERED, DrillPhase.GAVE_UP, DrillPhase.TIMED_OUT, DrillPhase.DONE):
        assert status_for(View.RESPONDER, status(ended)) == status(ended)

    action = event(EventKind.ACTION, "config_change ... (step: Lower max-model-len)", 30.0)
    action = action.model_copy(update={"data": FIX.model_dump(mode="json")})
    shown = event_for(View.RESPONDER, action, live)
    assert shown is not None
    assert (
        shown.text == "config_change serving: args: --max-model-len 99999 -> --max-model-len 4096"
    )
    assert "Lower" not in shown.model_dump_json() and "4096 tokens" not in shown.model_dump_json()
    injected = event(EventKind.TIMELINE, "inject: set_args serving --max-model-len 99999", None)
    assert event_for(View.RESPONDER, injected, live) is None
    assert event_for(View.FACILITATOR, injected, live) == injected
    assert event_for(View.RESPONDER, injected, status(DrillPhase.DONE)) == injected


def test_a_crash_loop_is_one_line_with_a_count_until_a_person_acts() -> None:
    evs = [
        event(EventKind.PHASE, "handed over", 1.0),
        loop(2.0),
        event(EventKind.PROBE, "probes: 0/1 pass", 2.1),
        loop(3.0),
        loop(3.5, node="node2"),
        loop(4.0, crashes=2, restarts=1),
        event(EventKind.ACTION, "restart serving: restarted", 5.0, actor="outside_tool"),
        loop(6.0),
    ]
    got = [(ln.at_s, ln.text, ln.count, ln.last_at_s) for ln in lines(evs)]
    assert got == [
        (1.0, "handed over", 1, None),
        (2.0, "serving crashed and restarted ×3, crashed again (restart policy)", 3, 4.0),
        (2.1, "probes: 0/1 pass", 1, None),
        (3.5, "node2 crashed and restarted ×1 (restart policy)", 1, 3.5),
        (5.0, "restart serving: restarted (outside tool)", 1, None),
        (6.0, "serving crashed and restarted ×1 (restart policy)", 1, 6.0),
    ]


def test_the_users_figures_are_one_line_redrawn_in_place_that_closes_no_crash_loop() -> None:
    folder = Lines()
    a = folder.add(loop(3.0))
    u1 = folder.add(event(EventKind.USERS, "users: 10% failing", 4.0))
    b = folder.add(loop(5.0, crashes=1, restarts=1))
    u2 = folder.add(event(EventKind.USERS, "users: 90% failing", 6.0))
    assert b.id == a.id and b.count == 2  # the crash loop's line goes on past the users'
    assert u2.id == u1.id and (u2.text, u2.at_s) == ("users: 90% failing", 6.0)


def test_the_users_figures_count_answers_by_when_they_came() -> None:
    from runner.drill.users import BIN_S, BINS, WINDOW_S, users_view
    from runner.run.traffic import Outcome, Sent
    from runner.spec.workload import Api

    def sent(end: float, ok: bool) -> Sent:
        return Sent(
            index=0,
            api=Api.CHAT,
            stream=False,
            prompt_tokens=1,
            max_tokens=1,
            intended=end - 0.5,
            start=end - 0.5,
            end=end,
            first_token=None,
            tokens=1 if ok else 0,
            outcome=Outcome.OK if ok else Outcome.REFUSED,
        )

    now = 1000.0
    answers = [sent(now - 30, True), sent(now - 15, False), sent(now - 5, False)]
    answers += [sent(now - 1, True), sent(now + 1, False)]  # the last not answered yet
    v = users_view(answers, now, fault=now - 20)
    assert (v.sent, v.failed, v.fault_sent, v.fault_failed) == (4, 2, 3, 2)
    assert (v.now_sent, v.now_failed, v.error_rate_now) == (2, 1, 0.5)  # last WINDOW_S
    assert (v.window_s, v.bin_s, len(v.bins)) == (WINDOW_S, BIN_S, BINS)
    assert v.bins[-1] == (1, 0) and v.bins[-3] == (1, 1) and sum(b[0] for b in v.bins) == 4
    assert users_view(answers, now, fault=None).fault_sent == 0
    assert v.line() == (
        "users: 50% failing (1 of 2) in the last 10 s; 2 of 3 failed since the fault, 2 of 4 in all"
    )
