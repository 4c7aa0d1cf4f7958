"""What the load's users felt (runner.run.impact): requests divided into phases, the figures,
when users saw the fault first and last, and the bounds judged on them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from runner.results.schema import Verdict
from runner.run.impact import (
    BACK_EVIDENCE,
    Back,
    LastSeen,
    Marks,
    Users,
    figures,
    first_failure,
    judge_phase,
    last_failure,
    percentile,
    phase_figures,
)
from runner.run.record import Recorder
from runner.run.traffic import Outcome, Sent
from runner.spec.timing import TimeScale
from runner.spec.workload import Api, Load, LoadPhase, PhaseBounds


def _sent(t: float, *, ok: bool = True, took: float = 0.01, i: int = 0) -> Sent:
    return Sent(
        index=i,
        api=Api.CHAT,
        stream=False,
        prompt_tokens=8,
        max_tokens=8,
        intended=t,
        start=t,
        end=t + took,
        first_token=None,
        tokens=8 if ok else 0,
        outcome=Outcome.OK if ok else Outcome.REFUSED,
    )


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([5.0], 99) == 5.0


def test_requests_fall_in_the_phase_of_their_intended_send_time() -> None:
    marks = Marks(injected=10.0, fault=12.0, restore=20.0, restored=30.0)
    assert [marks.phase_of(t) for t in (0, 10, 11.9, 12, 19.9, 20, 29.9, 30, 99)] == [
        LoadPhase.BASELINE,
        LoadPhase.INJECT,
        LoadPhase.INJECT,
        LoadPhase.FAULT,
        LoadPhase.FAULT,
        LoadPhase.RECOVER,
        LoadPhase.RECOVER,
        LoadPhase.VERIFY,
        LoadPhase.VERIFY,
    ]
    assert Marks(injected=10.0).phase_of(50) is LoadPhase.FAULT  # never restored


def test_a_phase_counts_failures_and_the_survivors_latency() -> None:
    f = phase_figures(LoadPhase.FAULT, [_sent(0, took=0.1), _sent(1, ok=False), _sent(2, took=0.3)])
    assert (f.sent, f.failed, f.error_rate) == (3, 1, round(1 / 3, 6))
    assert (f.p50_ms, f.p99_ms) == (100.0, 300.0)
    assert f.outcomes == {"ok": 2, "refused": 1}
    assert phase_figures(LoadPhase.VERIFY, []).error_rate is None


def test_users_saw_first_is_the_first_failed_answer_after_the_injection() -> None:
    sent = [_sent(1, ok=False), _sent(11, took=0.5), _sent(12, ok=False, took=2.0)]
    assert first_failure(sent, 10.0) == 14.0
    assert first_failure([_sent(11)], 10.0) is None


def _ok(*ts: float) -> list[Sent]:
    return [_sent(t) for t in ts]


def test_users_saw_last_is_where_the_error_rate_stays_at_the_baselines() -> None:
    # restore at 20: failures at 20.5 and 22 (ending 22.01), then only successes
    sent = [_sent(20.5, ok=False), _sent(21), _sent(22, ok=False), *_ok(*range(23, 33))]
    assert last_failure(sent, 20.0, 0.0) == LastSeen(Back.BACK, 22.01, 13)
    assert last_failure(_ok(*range(21, 31)), 20.0, 0.0) == LastSeen(Back.BACK, 20.0, 10)
    not_back = [*_ok(*range(21, 31)), _sent(31, ok=False)]
    assert last_failure(not_back, 20.0, 0.0) == LastSeen(Back.NOT_BACK, None, 11)
    # a baseline that fails one in three: one failure in three after is the baseline's
    tail = [_sent(30 + i, ok=i % 3 != 2) for i in range(12)]
    assert last_failure(tail, 29.0, 1 / 3) == LastSeen(Back.BACK, 29.0, 12)


def test_one_lucky_success_while_failures_go_on_is_not_back() -> None:
    # failures and successes alternate to the load's end: no stretch stays at the baseline's 0
    flapping = [_sent(21 + i, ok=i % 2 == 1) for i in range(30)]
    assert last_failure(flapping, 20.0, 0.0).back is Back.NOT_BACK
    # failures to the end but for the last few successes: too few to be back
    lucky = [*(_sent(21 + i, ok=False) for i in range(20)), *_ok(41, 42, 43)]
    assert last_failure(lucky, 20.0, 0.0).back is Back.NOT_BACK


def test_a_burst_of_failures_is_not_diluted_by_the_successes_after_it() -> None:
    # a baseline that fails 5 %: 10 failures right after the restore, then 500 successes;
    # the whole suffix fails 2 %, but users saw failures until the burst's last one
    burst = [*(_sent(21 + i * 0.01, ok=False) for i in range(10)), *_ok(*range(22, 522))]
    assert last_failure(burst, 20.0, 0.05) == LastSeen(Back.BACK, 21.1, 510)


def test_too_few_requests_after_the_restore_are_no_evidence_not_a_failure() -> None:
    assert last_failure([], 20.0, 0.0) == LastSeen(Back.NO_EVIDENCE, None, 0)
    assert last_failure(_ok(21, 22), 20.0, 0.0) == LastSeen(Back.NO_EVIDENCE, None, 2)
    from datetime import UTC, datetime

    from runner.spec.kinds import Window

    ctx = SimpleNamespace(
        rec=Recorder(),
        scale=TimeScale(100, 0.1),
        target="n",
        restore_at=datetime.fromtimestamp(20.0, UTC),
    )
    users = Users(ctx, Load.model_validate({"rate": 10}))  # type: ignore[arg-type]
    users._last = last_failure([], 20.0, 0.0)
    fig = figures([], Marks(10.0, 10.0, 20.0, None), ctx.scale, users.spec, "n")[0]  # type: ignore[arg-type]
    users._judge_last(Window(max_s=600), fig)
    (a,) = ctx.rec.assertions
    assert a.verdict is Verdict.INCONCLUSIVE
    assert a.observed.startswith("0 requests sent after the restore: at least 10 tell")


def test_figures_convert_the_windows_to_real_world_seconds() -> None:
    after = _ok(*(21 + i * 0.5 for i in range(BACK_EVIDENCE)))
    sent = [_sent(0), _sent(10.5, ok=False), _sent(20.5, ok=False), *after, _sent(31)]
    spec = Load.model_validate({"rate": 10})
    marks = Marks(10.0, 10.0, 20.0, 30.0)
    fig, first, last = figures(sent, marks, TimeScale(100, 0.1), spec, "node1")
    assert [p.sent for p in fig.phases] == [1, 0, 1, 11, 1]
    assert (first, last) == (10.51, LastSeen(Back.BACK, 20.51, 12))
    assert (fig.users_saw_first_s, fig.users_saw_last_s) == (51.0, 51.0)  # 0.51 s at x100


def _ctx() -> Any:
    return SimpleNamespace(rec=Recorder(), scale=TimeScale(100, 0.1))


def test_a_bound_set_too_tight_fails_with_expected_and_observed() -> None:
    base = phase_figures(LoadPhase.BASELINE, [_sent(i, took=0.01) for i in range(10)])
    fault = phase_figures(LoadPhase.FAULT, [_sent(i, ok=i % 2 == 0, took=0.05) for i in range(10)])
    ctx = _ctx()
    judge_phase(
        ctx,
        LoadPhase.FAULT,
        PhaseBounds(max_error_rate=0.1, max_errors=5, max_p99_ratio=2),
        fault,
        base,
    )
    got = {a.name: a for a in ctx.rec.assertions}
    rate = got["impact: fault: error rate"]
    assert rate.verdict is Verdict.FAILED
    assert (rate.expected, rate.observed) == (
        "error rate <= 0.1",
        "0.500 (5 of 10 failed: 5 refused)",
    )
    assert got["impact: fault: errors"].verdict is Verdict.PASSED
    p99 = got["impact: fault: p99 latency"]
    assert p99.verdict is Verdict.FAILED and p99.observed == "50.0 ms (5.00 x)"


def test_a_phase_without_requests_or_a_baseline_without_latency_is_not_passed() -> None:
    ctx = _ctx()
    empty = phase_figures(LoadPhase.VERIFY, [])
    judge_phase(ctx, LoadPhase.VERIFY, PhaseBounds(max_error_rate=0), empty, empty)
    assert [a.verdict for a in ctx.rec.assertions] == [Verdict.FAILED]
    ctx = _ctx()
    dead = phase_figures(LoadPhase.BASELINE, [_sent(0, ok=False)])
    ok = phase_figures(LoadPhase.VERIFY, [_sent(1)])
    judge_phase(ctx, LoadPhase.VERIFY, PhaseBounds(max_p50_ratio=2), ok, dead)
    assert [a.verdict for a in ctx.rec.assertions] == [Verdict.ERROR]


def test_a_latency_over_only_by_the_machines_contended_time_is_inconclusive() -> None:
    from runner.run.load import StallSource, Stretch

    base = phase_figures(LoadPhase.BASELINE, [_sent(0, took=0.01)])
    slow = phase_figures(LoadPhase.VERIFY, [_sent(1, took=0.05)])  # 30 ms over 2 x 10 ms
    bounds = PhaseBounds(max_p99_ratio=2)
    verdicts = []
    for stalled in (0.0, 0.01, 0.2):
        ctx = _ctx()
        stretch = Stretch(wall_s=1.0, stalled_s=stalled, source=StallSource.PSI)
        judge_phase(ctx, LoadPhase.VERIFY, bounds, slow, base, stretch)
        verdicts.append(ctx.rec.assertions[0].verdict)
    assert verdicts == [Verdict.FAILED, Verdict.FAILED, Verdict.INCONCLUSIVE]
    assert "too loaded to judge" in ctx.rec.assertions[0].observed


def test_a_request_in_flight_when_the_fault_lands_counts_in_the_fault() -> None:
    from runner.run.impact import by_phase

    marks = Marks(injected=10.0, fault=12.0, restore=20.0, restored=30.0)
    sent = [
        _sent(9.0, took=0.5),  # baseline, answered before the injection
        _sent(9.5, ok=False, took=1.0),  # in flight when the injection began
        _sent(9.9, ok=False, took=2.5),  # in flight when the fault was in place
        _sent(11.0, took=2.0),  # sent while it was applied, answered after
        _sent(19.9, ok=False, took=1),  # the fault's, though answered after the restore
    ]
    got = by_phase(sent, marks)
    assert [len(got[p]) for p in LoadPhase] == [1, 1, 3, 0, 0]


def test_users_saw_first_counts_from_the_fault_in_place_and_never_below_zero() -> None:
    spec = Load.model_validate({"rate": 10})
    scale = TimeScale(100, 0.1)
    late = [_sent(0), _sent(13.0, ok=False)]  # fault in place at 12: seen 1.01 s later
    early = [_sent(0), _sent(10.5, ok=False)]  # failed while the injection was applied
    marks = Marks(10.0, 12.0, None, None)
    assert figures(late, marks, scale, spec, "n")[0].users_saw_first_s == 101.0
    assert figures(early, marks, scale, spec, "n")[0].users_saw_first_s == 0.0


def test_the_load_a_lab_carries_is_its_share_and_the_progress_says_so() -> None:
    from runner.report.impact_text import heading, properties
    from runner.results.schema import ImpactFigures

    said: list[str] = []
    ctx = SimpleNamespace(rec=Recorder(), scale=TimeScale(1, 10), target="n", progress=said.append)
    users = Users(ctx, Load.model_validate({"rate": 10}), 0.3)  # type: ignore[arg-type]
    assert users.spec is not None and users.spec.rate == 3
    assert users.loop_text() == "3 requests/s (the lab's load_scale 0.3 of 10 requests/s)"
    one = Users(ctx, Load.model_validate({"concurrency": 1}), 0.3)  # type: ignore[arg-type]
    assert one.loop_text() == "1 users"  # the share changed nothing: not said
    full = Users(ctx, Load.model_validate({"rate": 10}))  # type: ignore[arg-type]
    assert full.loop_text() == "10 requests/s"
    assert Users(ctx, None, 0.3).spec is None  # type: ignore[arg-type]
    imp = ImpactFigures(mode="open", rate=3, load_scale=0.3, node="n", phases=[])
    assert heading(imp) == (
        "load: 3 requests/s to n (latency in wall ms from the intended send, the lab's "
        "load_scale 0.3)"
    )
    assert properties(imp)["gameday.impact.load_scale"] == "0.3"
    full = ImpactFigures(mode="open", rate=10, node="n", phases=[])
    assert heading(full) == "load: 10 requests/s to n (latency in wall ms from the intended send)"
    assert "gameday.impact.load_scale" not in properties(full)
