"""The watchdog's state machine, transition by transition (times are real-world seconds)."""

from __future__ import annotations

import pytest

from runner.watchdog.machine import (
    Decision,
    Memory,
    Observation,
    Policy,
    WatchState,
    start,
    step,
    wants_probe,
)

P = Policy(suspect_after=3, restart_budget=2, budget_window_s=3600, boot_stall_s=1200)


def obs(
    now: float,
    *,
    probe: bool | None = None,
    down: tuple[str, ...] = (),
    progress: bool = False,
    ready: bool = True,
    detail: str = "refused",
    started: tuple[str, ...] = (),
) -> Observation:
    return Observation(
        now_s=now,
        progress=progress,
        ready=ready,
        down=down,
        probe_ok=probe,
        probe_detail=detail,
        started=started,
    )


def mem(
    state: WatchState,
    *,
    since: float = 0,
    progress_at: float = 0,
    failures: int = 0,
    restarts: tuple[float, ...] = (),
) -> Memory:
    return Memory(
        state=state, since_s=since, progress_at_s=progress_at, failures=failures, restarts=restarts
    )


def test_a_watch_begins_booting() -> None:
    assert start(50.0) == mem(WatchState.BOOTING, since=50, progress_at=50)


@pytest.mark.parametrize(
    ("state", "ready", "want"),
    [
        (WatchState.BOOTING, False, False),
        (WatchState.BOOTING, True, True),
        (WatchState.SERVING, False, True),
        (WatchState.SUSPECT, False, True),
        (WatchState.GAVE_UP, False, True),
        (WatchState.RESTARTING, True, False),
    ],
)
def test_probes_while_booting_only_once_ready(state: WatchState, ready: bool, want: bool) -> None:
    assert wants_probe(mem(state), ready) is want


def test_booting_ends_when_inference_completes() -> None:
    s = step(P, mem(WatchState.BOOTING, since=100), obs(4000, probe=True))
    assert (s.decision, s.memory) == (
        Decision.SERVING,
        mem(WatchState.SERVING, since=4000, progress_at=4000),
    )
    assert s.reason == "inference completed after 3900 s of boot"


def test_a_boot_that_moves_is_never_cut_short() -> None:
    m = start(0)
    for now in range(600, 7201, 600):  # two hours of boot, a log line every ten minutes
        s = step(P, m, obs(now, progress=True, ready=False))
        assert s.decision is Decision.WAIT
        m = s.memory
    assert m == mem(WatchState.BOOTING, since=0, progress_at=7200)
    assert s.reason == "boot moving (booting 7200 s)"


def test_a_quiet_boot_waits_until_the_stall_window() -> None:
    s = step(P, mem(WatchState.BOOTING, progress_at=100), obs(1299, ready=False))
    assert s.decision is Decision.WAIT
    assert s.memory == mem(WatchState.BOOTING, progress_at=100)
    assert s.reason == "boot quiet for 1199 s of 1200 s (booting 1299 s)"


def test_a_stalled_boot_is_restarted_whole() -> None:
    s = step(P, mem(WatchState.BOOTING, progress_at=100), obs(1300, ready=False))
    assert s.decision is Decision.RESTART
    assert s.memory == mem(WatchState.RESTARTING, since=1300, progress_at=1300, restarts=(1300,))
    assert s.reason == (
        "boot stalled: no log line or state change for 1200 s; "
        "whole-group restart 1 of 2 within 3600 s"
    )


def test_a_node_down_while_booting_makes_it_suspect() -> None:
    s = step(P, mem(WatchState.BOOTING, since=10), obs(20, down=("node1",), ready=False))
    assert s.decision is Decision.SUSPECT
    assert s.memory == mem(WatchState.SUSPECT, since=20, failures=1)
    assert s.reason == "failed look 1 of 3: down: node1"


def test_ready_but_not_answering_while_booting_is_a_failed_look() -> None:
    s = step(P, mem(WatchState.BOOTING), obs(20, probe=False, detail="HTTP 500"))
    assert (s.decision, s.memory.failures) == (Decision.SUSPECT, 1)
    assert s.reason == "failed look 1 of 3: inference failed: HTTP 500"


def test_serving_stays_serving_while_inference_completes() -> None:
    m = mem(WatchState.SERVING, since=5)
    s = step(P, m, obs(40, probe=True))
    assert (s.decision, s.memory, s.reason) == (Decision.OK, m, "inference completed")


def test_health_is_not_serving_a_failed_inference_is_suspect() -> None:
    s = step(P, mem(WatchState.SERVING, since=5), obs(40, probe=False, detail="timed out"))
    assert s.decision is Decision.SUSPECT
    assert s.memory == mem(WatchState.SUSPECT, since=40, failures=1)


def test_a_completed_probe_with_a_node_down_is_still_a_failed_look() -> None:
    s = step(P, mem(WatchState.SERVING), obs(40, probe=True, down=("node3",)))
    assert (s.decision, s.memory.failures) == (Decision.SUSPECT, 1)


def test_suspect_counts_failed_looks_then_restarts_the_group() -> None:
    s = step(P, mem(WatchState.SUSPECT, since=40, failures=1), obs(70, probe=False))
    assert (s.decision, s.memory) == (
        Decision.SUSPECT,
        mem(WatchState.SUSPECT, since=40, failures=2),
    )
    s = step(P, s.memory, obs(100, probe=False, down=("node1",)))
    assert s.decision is Decision.RESTART
    assert s.memory == mem(WatchState.RESTARTING, since=100, progress_at=100, restarts=(100,))
    assert s.reason == (
        "3 failed look(s) in a row: down: node1; inference failed: refused; "
        "whole-group restart 1 of 2 within 3600 s"
    )


def test_suspect_that_answers_again_is_serving_without_a_restart() -> None:
    s = step(P, mem(WatchState.SUSPECT, failures=2, restarts=(7,)), obs(100, probe=True))
    assert s.decision is Decision.SERVING
    assert s.memory == mem(WatchState.SERVING, since=100, progress_at=100, restarts=(7,))
    assert s.reason == "inference completed after 2 failed look(s)"


def test_after_the_restart_the_group_boots() -> None:
    m = mem(WatchState.RESTARTING, since=100, progress_at=100, failures=0, restarts=(100,))
    s = step(P, m, obs(130, ready=False))
    assert s.decision is Decision.BOOT
    assert s.memory == mem(WatchState.BOOTING, since=130, progress_at=130, restarts=(100,))


def test_the_budget_spent_gives_up() -> None:
    m = mem(WatchState.SUSPECT, failures=2, restarts=(1000, 2000), progress_at=5)
    s = step(P, m, obs(3000, probe=False, detail="connection refused"))
    assert s.decision is Decision.GIVE_UP
    assert s.memory == mem(WatchState.GAVE_UP, since=3000, progress_at=5, restarts=(1000, 2000))
    assert s.reason == (
        "3 failed look(s) in a row: inference failed: connection refused; restart budget spent "
        "(2 restart(s) within 3600 s): a person must look"
    )


def test_restarts_older_than_the_window_no_longer_count() -> None:
    m = mem(WatchState.SUSPECT, failures=2, restarts=(1000, 2000))
    s = step(P, m, obs(4600, probe=False))
    assert s.decision is Decision.RESTART
    assert s.memory.restarts == (2000, 4600)
    assert s.reason.endswith("whole-group restart 2 of 2 within 3600 s")


def test_a_zero_budget_gives_up_at_once() -> None:
    p = Policy(suspect_after=1, restart_budget=0)
    s = step(p, mem(WatchState.SERVING), obs(10, probe=False))
    assert s.decision is Decision.GIVE_UP


def test_gave_up_holds_and_never_restarts() -> None:
    m = mem(WatchState.GAVE_UP, since=3000, restarts=(1000, 2000))
    for now in (3030, 3060, 9000, 100_000):
        s = step(P, m, obs(now, probe=False, down=("node1",)))
        assert (s.decision, s.memory) == (Decision.HOLD, m)
    assert s.reason == "gave up: no restart (down: node1; inference failed: refused)"


def test_gave_up_returns_to_serving_when_someone_recovers_it() -> None:
    m = mem(WatchState.GAVE_UP, since=3000, restarts=(1000, 2000))
    s = step(P, m, obs(5000, probe=True))
    assert s.decision is Decision.SERVING
    assert s.memory == mem(WatchState.SERVING, since=5000, progress_at=5000)


def test_a_crash_loop_ends_in_gave_up_after_the_budget() -> None:
    """Boot, serve, crash on the first request: every restart crashes again."""
    m = start(0)
    decisions = []
    now = 0.0
    for _ in range(40):
        now += 30
        booting = m.state is WatchState.BOOTING
        o = obs(
            now, ready=True, probe=booting and m.failures == 0, down=() if booting else ("node1",)
        )
        s = step(P, m, o)
        decisions.append(s.decision)
        m = s.memory
    assert decisions.count(Decision.RESTART) == 2
    assert decisions.count(Decision.GIVE_UP) == 1
    assert m.state is WatchState.GAVE_UP
    assert decisions[-1] is Decision.HOLD


@pytest.mark.parametrize("state", [WatchState.SERVING, WatchState.SUSPECT])
def test_a_node_started_anew_by_someone_else_boots(state: WatchState) -> None:
    m = mem(state, since=5, failures=1 if state is WatchState.SUSPECT else 0, restarts=(3,))
    s = step(P, m, obs(40, probe=False, ready=False, started=("serving",)))
    assert s.decision is Decision.WAIT
    assert s.memory == mem(WatchState.BOOTING, since=40, progress_at=40, restarts=(3,))
    assert s.reason == "serving started anew (not by the watchdog): booting"


def test_a_node_started_anew_while_another_is_down_is_a_failed_look() -> None:
    s = step(P, mem(WatchState.SERVING), obs(40, probe=False, down=("node1",), started=("node2",)))
    assert (s.decision, s.memory.state) == (Decision.SUSPECT, WatchState.SUSPECT)


def test_gave_up_ignores_a_node_started_anew_until_it_serves() -> None:
    m = mem(WatchState.GAVE_UP, since=3000, restarts=(1000, 2000))
    s = step(P, m, obs(3030, probe=False, ready=False, started=("node1",)))
    assert (s.decision, s.memory) == (Decision.HOLD, m)
