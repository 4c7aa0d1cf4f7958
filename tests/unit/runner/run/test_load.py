"""A verdict never depends on the machine's load: the stall clock (PSI, or the scheduler delay of
a sampling thread), the stall within a measured span, the rule that makes a window missed only
by the stall `inconclusive`, and that verdict through a run, its reports and the exit code."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from click.testing import CliRunner

from runner.cli.main import main
from runner.cli.options import VERDICT_EXIT
from runner.labs.base import LabDriver
from runner.report import write_reports
from runner.results.schema import Verdict, combine
from runner.results.trends import Measure, load_history
from runner.run import context, load, suite
from runner.run.journal import Journal
from runner.run.load import (
    LoadWatch,
    PsiClock,
    SchedulerDelayClock,
    StallSource,
    Stretch,
    judge,
    parse_psi,
)
from runner.run.phases.detect import check_delivered
from runner.run.receiver import WebhookReceiver
from runner.run.record import Recorder
from runner.run.selection import last_failed
from runner.spec.expectations import AlertExpectation
from runner.spec.kinds import Window
from runner.spec.timing import TimeScale
from tests.support.fakelab import fake_run, inventory, scenario_doc, wrong_flag
from tests.support.results import NOW, run_result, scenario_result
from tests.support.stall import watch

PSI_TEXT = (
    "some avg10=11.22 avg60=3.91 avg300=8.81 total=269263249\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
)


# ---- the stall clock -------------------------------------------------------------------------


def test_psi_some_total_is_read_in_seconds() -> None:
    assert parse_psi(PSI_TEXT) == pytest.approx(269.263249)


@pytest.mark.parametrize("text", ["", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", "junk"])
def test_psi_without_a_some_line_is_none(text: str) -> None:
    assert parse_psi(text) is None


def test_the_psi_clock_reads_its_file(tmp_path: Path) -> None:
    f = tmp_path / "cpu"
    f.write_text(PSI_TEXT)
    clock = PsiClock(f)
    assert PsiClock.available(f)
    assert clock.stalled_s() == pytest.approx(269.263249)
    f.write_text(PSI_TEXT.replace("269263249", "270263249"))
    assert clock.stalled_s() == pytest.approx(270.263249)
    assert clock.source is StallSource.PSI


def test_a_missing_psi_file_is_not_available(tmp_path: Path) -> None:
    assert not PsiClock.available(tmp_path / "absent")
    (tmp_path / "empty").write_text("")
    assert not PsiClock.available(tmp_path / "empty")


def test_the_fallback_sums_how_late_its_sleeps_wake() -> None:
    """Asked to sleep 10 ms, woken after 50, 10 and 12 ms: 40 + 0 + 2 ms stalled."""
    now = [0.0]
    took = iter([0.05, 0.01, 0.012])

    def sleep(_s: float) -> None:
        now[0] += next(took)

    clock = SchedulerDelayClock(sleep=sleep, clock=lambda: now[0], every_s=0.01)
    late = [clock.tick() for _ in range(3)]
    assert late == pytest.approx([0.04, 0.0, 0.002])
    assert clock.stalled_s() == pytest.approx(0.042)
    assert clock.source is StallSource.SCHEDULER


def test_the_fallback_thread_runs() -> None:
    """Its thread ticks on its own (a stall of zero or more: the machine decides)."""
    clock = SchedulerDelayClock(every_s=0.001).start()
    assert clock.stalled_s() >= 0.0


def test_the_process_watch_uses_psi_where_it_is_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "_watch", None)
    monkeypatch.setattr(PsiClock, "available", classmethod(lambda cls, path=None: False))
    assert load.process_watch().source is StallSource.SCHEDULER
    monkeypatch.setattr(load, "_watch", None)
    monkeypatch.setattr(PsiClock, "available", classmethod(lambda cls, path=None: True))
    assert load.process_watch().source is StallSource.PSI
    assert load.process_watch() is load.process_watch()  # one per process


# ---- the stall within a span -----------------------------------------------------------------


class Readings:
    """A stall clock read at set times: (epoch second, cumulative stall)."""

    source = StallSource.PSI

    def __init__(self) -> None:
        self.value = 0.0

    def stalled_s(self) -> float:
        return self.value


T0 = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)


def test_the_stall_within_a_span_is_interpolated_between_samples() -> None:
    clock, now = Readings(), [T0]
    w = LoadWatch(clock, now=lambda: now[0])
    for second, stalled in [(0, 0.0), (1, 0.0), (2, 1.0), (3, 1.0)]:
        now[0], clock.value = T0 + timedelta(seconds=second), stalled
        w.sample()
    # 1.5 -> 2.5: half of the second that stalled a whole second, and nothing after
    st = w.stretch(T0 + timedelta(seconds=1.5), T0 + timedelta(seconds=2.5))
    assert (st.wall_s, st.stalled_s) == (1.0, pytest.approx(0.5))
    # a span older than the history counts from its first sample: less stall, never more
    st = w.stretch(T0 - timedelta(seconds=10), T0 + timedelta(seconds=3))
    assert (st.wall_s, st.stalled_s) == (13.0, pytest.approx(1.0))


# ---- the rule --------------------------------------------------------------------------------

X100 = TimeScale(scale=100.0, allowance_s=0.0)


def stretch(wall_s: float, stalled_s: float) -> Stretch:
    return Stretch(wall_s, stalled_s, StallSource.PSI)


def test_an_overrun_the_stall_explains_is_inconclusive_with_the_evidence() -> None:
    """The issue's case: 710.4 s real against 600 s, 1.3 s of 7.104 s contended."""
    got = judge(X100, Window(max_s=600), 710.4, stretch(7.104, 1.3))
    assert got.verdict is Verdict.INCONCLUSIVE
    assert got.evidence == (
        "; for 130.0 s real (1.300 s of the 7.104 s measured) the machine's CPUs were "
        "contended (/proc/pressure/cpu), and without it 580.4 s real is within 600 s: the "
        "machine was too loaded to judge"
    )


def test_an_overrun_the_stall_does_not_explain_is_failed() -> None:
    got = judge(X100, Window(max_s=600), 710.4, stretch(7.104, 0.5))
    assert got.verdict is Verdict.FAILED
    assert "660.4 s real" in got.evidence


def test_within_the_window_stays_passed_however_loaded() -> None:
    assert judge(X100, Window(max_s=600), 590.0, stretch(5.9, 5.0)).verdict is Verdict.PASSED


def test_no_stall_is_the_check_as_it_was() -> None:
    assert judge(X100, Window(max_s=600), 610.0, stretch(6.1, 0.0)) == load.Judged(
        Verdict.FAILED, ""
    )
    assert judge(X100, Window(max_s=600), 610.0, None).verdict is Verdict.FAILED


def test_a_lower_bound_is_never_failed_because_of_load() -> None:
    w = Window(min_s=100, max_s=300)
    assert judge(X100, w, 80.0, stretch(0.8, 0.3)).verdict is Verdict.INCONCLUSIVE
    assert judge(X100, w, 50.0, stretch(0.5, 0.3)).verdict is Verdict.FAILED


def test_the_allowance_counts_before_the_stall() -> None:
    """Within max + allowance is a pass, as it always was; beyond it the stall is weighed."""
    scale = TimeScale(scale=100.0, allowance_s=0.02)  # 2 s real of slack
    assert judge(scale, Window(max_s=600), 601.5, stretch(6.015, 0.0)).verdict is Verdict.PASSED
    assert judge(scale, Window(max_s=600), 603.0, stretch(6.03, 0.01)).verdict is (
        Verdict.INCONCLUSIVE
    )


# ---- the verdict through a run ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("verdicts", "worst"),
    [
        ([Verdict.PASSED, Verdict.INCONCLUSIVE], Verdict.INCONCLUSIVE),
        ([Verdict.INCONCLUSIVE, Verdict.FAILED], Verdict.FAILED),  # a failure is still one
        ([Verdict.INCONCLUSIVE, Verdict.ERROR], Verdict.ERROR),
        ([Verdict.SKIPPED, Verdict.INCONCLUSIVE], Verdict.INCONCLUSIVE),
        ([Verdict.PASSED, Verdict.SKIPPED], Verdict.PASSED),
    ],
)
def test_combine(verdicts: list[Verdict], worst: Verdict) -> None:
    assert combine(verdicts) is worst


def test_an_inconclusive_run_exits_3() -> None:
    assert VERDICT_EXIT[Verdict.INCONCLUSIVE] == 3


# the fake lab's wrong flag exits after 0.2 lab s: 200 s real at x1000, over this 120 s window
TIGHT = scenario_doc()
TIGHT["expect"]["time_to_fail"] = {"max_s": 120}


def ttf_of(tmp_path: Path, share: float, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    monkeypatch.setattr(context, "process_watch", lambda: watch(share))
    result = fake_run(tmp_path, TIGHT, wrong_flag(exit_after_s=0.2)).run()
    return result, next(a for a in result.assertions if a.name == "expect: time to fail")


def test_a_quiet_machine_fails_the_late_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, ttf = ttf_of(tmp_path, 0.0, monkeypatch)
    assert (ttf.verdict, result.verdict) == (Verdict.FAILED, Verdict.FAILED)


def test_a_loaded_machine_makes_it_inconclusive_with_the_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPUs contended 3/4 of the time: 200 s real of which 150 are the load."""
    result, ttf = ttf_of(tmp_path, 0.75, monkeypatch)
    assert ttf.verdict is Verdict.INCONCLUSIVE, ttf.observed
    assert "the machine's CPUs were contended (/proc/pressure/cpu)" in ttf.observed
    assert ttf.observed.endswith("is within 120 s: the machine was too loaded to judge")
    assert result.verdict is Verdict.INCONCLUSIVE
    others = [a.verdict for a in result.assertions if a is not ttf]
    assert set(others) == {Verdict.PASSED}


def test_through_the_cli_it_exits_3_and_says_so_in_every_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = fake_run(tmp_path / "lab", TIGHT, wrong_flag(exit_after_s=0.2))
    real = suite.run_scenario

    def on_fake(ls: Any, lab: Any, journal: Any, progress: Any) -> Any:
        return real(ls, lab, journal, progress, http=httpx.Client(transport=lab.transport))

    monkeypatch.setattr(suite, "run_scenario", on_fake)
    monkeypatch.setattr(suite, "open_lab", lambda _inv: run.lab)
    monkeypatch.setattr(context, "process_watch", lambda: watch(0.75))
    inv = tmp_path / "lab" / "inventory.yaml"
    assert inventory(tmp_path / "lab")  # written where the CLI reads it
    reports = tmp_path / "reports"
    got = CliRunner().invoke(
        main, ["run", str(run.ls.path), "--lab", str(inv), "--reports", str(reports)]
    )
    assert got.exit_code == 3, got.output
    assert "verdict: inconclusive" in got.output
    assert "INCONCLUSIVE fake-startup: expect: time to fail" in got.output
    [folder] = [d for d in reports.iterdir() if not d.is_symlink()]
    result = json.loads((folder / "result.json").read_text())
    assert result["verdict"] == "inconclusive"
    case = ET.parse(folder / "junit.xml").getroot().find(".//testcase")
    assert case is not None
    error = case.find("error")
    assert error is not None and error.get("type") == "Inconclusive"
    assert "too loaded to judge" in (error.get("message") or "")
    assert "| INCONCLUSIVE | expect: time to fail |" in (folder / "report.md").read_text()
    assert 'class="inconclusive"' in (folder / "report.html").read_text()


# ---- a wait that saw nothing: waited for the load too, then judged ---------------------------


def not_restoring(tmp_path: Path, share: float, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fix that does not restore (the flag is still wrong): its verify waits out the window."""
    monkeypatch.setattr(context, "process_watch", lambda: watch(share))
    doc = scenario_doc()
    restart = {"kind": "restart", "nodes": ["serving"]}
    doc["recover"] = [{"name": "Restart", "outcome": "restores", "actions": [restart]}]
    result = fake_run(tmp_path, doc, wrong_flag()).run()
    return next(a for a in result.assertions if a.name == "recover 1: Restart: restores service")


def test_service_not_back_is_failed_once_the_lab_had_its_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contended half the time, the wait goes on until the lab had the whole window: failed."""
    restores = not_restoring(tmp_path, 0.5, monkeypatch)
    assert restores.verdict is Verdict.FAILED, restores.observed
    assert "too loaded" not in restores.observed


def test_service_not_back_on_a_starved_machine_is_inconclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contended 9/10 of the time, the lab never had its window before the wait's limit."""
    restores = not_restoring(tmp_path, 0.9, monkeypatch)
    assert restores.verdict is Verdict.INCONCLUSIVE, restores.observed
    assert "waited the machine's CPUs were contended (/proc/pressure/cpu)" in restores.observed
    assert restores.observed.endswith("the machine was too loaded to judge")


def delivery_context(share: float) -> context.Context:
    lab = SimpleNamespace(inventory=SimpleNamespace(lab=SimpleNamespace(monitoring=None)))
    return context.Context(
        lab=cast(LabDriver, lab),
        scale=TimeScale(scale=100.0, allowance_s=0.0),
        journal=cast(Journal, None),
        scenario_id="delivery",
        target="serving",
        progress=lambda _s: None,
        rec=Recorder(),
        http=cast(httpx.Client, None),
        load=watch(share),
    )


def test_an_alert_not_delivered_on_a_starved_machine_is_inconclusive() -> None:
    """The issue's first wrong verdict: "nothing delivered after 780 s real" on a healthy
    system whose machine was starved."""
    want = AlertExpectation(name="ExporterTargetDown", within_s=60, delivered=True)
    for share, verdict in [(0.0, Verdict.FAILED), (0.9, Verdict.INCONCLUSIVE)]:
        ctx = delivery_context(share)
        since = datetime.now(UTC) - timedelta(seconds=0.7)  # 60 s real at x100: 0.6 s, gone
        check_delivered(ctx, want, since, WebhookReceiver("127.0.0.1", 0))
        [a] = ctx.rec.assertions
        assert a.verdict is verdict, a.observed
        assert a.observed.startswith("nothing delivered after 60 s real")


# ---- history and --last-failed ---------------------------------------------------------------


def test_an_inconclusive_run_is_no_regression_and_no_baseline(tmp_path: Path) -> None:
    """300 s, then 900 s on a loaded machine (inconclusive), then 320 s: nothing regressed, and
    the third run is compared with the first."""

    for day, (ttr, verdict) in enumerate(
        [(300.0, Verdict.PASSED), (900.0, Verdict.INCONCLUSIVE), (320.0, Verdict.PASSED)]
    ):
        s = scenario_result("kv", id="kv", verdict=verdict, time_to_recover_s=ttr)
        run_id = f"2026010{day + 1}T000000Z-aaaaaa"
        started = NOW + timedelta(days=day)
        write_reports(run_result(s, run_id=run_id, started_at=started), tmp_path / run_id)
    [trend] = load_history(tmp_path).trends
    assert [p.recover_regressed for p in trend.points] == [False, False, False]
    assert trend.points[2].change_s[Measure.RECOVER] == pytest.approx(20.0)


def test_last_failed_runs_an_inconclusive_scenario_again(tmp_path: Path) -> None:

    run = run_result(
        scenario_result(id="loaded", verdict=Verdict.INCONCLUSIVE),
        scenario_result(id="fine", verdict=Verdict.PASSED),
        run_id="r1",
    )
    write_reports(run, tmp_path / "r1")
    assert last_failed(tmp_path).ids == frozenset({"loaded"})


@pytest.mark.parametrize(("share", "verdict"), [(0.0, Verdict.FAILED), (0.9, Verdict.INCONCLUSIVE)])
def test_no_failure_in_a_window_the_load_took_is_inconclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: float, verdict: Verdict
) -> None:
    monkeypatch.setattr(context, "process_watch", lambda: watch(share))
    result = fake_run(tmp_path, scenario_doc()).run()  # the node serves whatever its args
    happens = next(a for a in result.assertions if a.name == "expect: failure happens")
    assert (happens.verdict, result.verdict) == (verdict, verdict), happens.observed
