"""`gameday history`: each scenario's times over the runs in the reports folder, oldest first,
with the change against the run before and a regression in time to recover flagged."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import output
from runner.cli.main import main
from runner.report import write_reports
from runner.report.trends_page import chart
from runner.results.rundirs import link_latest
from runner.results.schema import (
    DrillOutcome,
    DrillRecord,
    ImpactFigures,
    PhaseFigures,
    RunMode,
    ScenarioResult,
    Verdict,
)
from runner.results.trends import Measure, load_history, regressed
from tests.support.results import NOW, run_result, scenario_result

RUNS = [  # run id, kv's (fail, detect, recover), tp's recover
    ("20260101T000000Z-aaaaaa", (120.0, 130.0, 300.0), 40.0),
    ("20260102T000000Z-bbbbbb", (118.0, 129.0, 310.0), 41.0),
    ("20260103T000000Z-cccccc", (121.5, 131.0, 400.0), 39.0),
]


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    for day, (run_id, (ttf, ttd, ttr), tp_ttr) in enumerate(RUNS):
        kv = scenario_result(
            "kv",
            id="kv-cache-shortage",
            verdict=Verdict.PASSED,
            time_to_fail_s=ttf,
            time_to_detect_s=ttd,
            time_to_recover_s=ttr,
        )
        tp = scenario_result(
            "tp", id="tp-mismatch", verdict=Verdict.PASSED, time_to_recover_s=tp_ttr
        )
        skipped = scenario_result("s", id="dhcp", verdict=Verdict.SKIPPED)
        started = NOW + timedelta(days=day)
        write_reports(
            run_result(kv, tp, skipped, run_id=run_id, started_at=started), tmp_path / run_id
        )
        link_latest(tmp_path, tmp_path / run_id)
    (tmp_path / "20251231T000000Z-broken").mkdir()
    (tmp_path / "20251231T000000Z-broken" / "result.json").write_text("{")
    return tmp_path


def test_three_runs_oldest_first_with_changes(reports: Path) -> None:
    h = load_history(reports, "kv-cache-shortage")
    (trend,) = h.trends
    assert [p.run_id for p in trend.points] == [r[0] for r in RUNS]
    assert [p.time_to_recover_s for p in trend.points] == [300.0, 310.0, 400.0]
    assert [p.change_s.get("time_to_recover_s") for p in trend.points] == [None, 10.0, 90.0]
    assert [p.change_s.get("time_to_fail_s") for p in trend.points] == [None, -2.0, 3.5]
    assert [p.recover_regressed for p in trend.points] == [False, False, True]  # +3%, +29%
    assert len(h.unreadable) == 1 and "20251231T000000Z-broken" in h.unreadable[0]


def test_every_scenario_that_ran_has_a_trend(reports: Path) -> None:
    assert [t.scenario for t in load_history(reports).trends] == [
        "kv-cache-shortage",
        "tp-mismatch",
    ]


def test_regression_rule() -> None:
    assert (regressed(100, 110), regressed(100, 110.5), regressed(100, None)) == (False, True, True)
    assert (regressed(None, 500), regressed(100, 50)) == (False, False)


def test_history_command_table(reports: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "out", output._Console(width=200, soft_wrap=True))
    got = CliRunner().invoke(main, ["history", "kv-cache-shortage", "--reports", str(reports)])
    assert got.exit_code == 0, got.output
    rows = [line for line in got.stdout.splitlines() if "Z-" in line]
    assert [r.split("│")[1].strip() for r in rows] == [r[0] for r in RUNS]
    assert "400.0 s [4.000 s lab] (+90.0 s) REGRESSED" in rows[2]
    assert "310.0 s [3.100 s lab] (+10.0 s)" in rows[1] and "REGRESSED" not in rows[1]
    assert "not read: " in got.stderr


def test_history_command_json(reports: Path) -> None:
    got = CliRunner().invoke(main, ["history", "--reports", str(reports), "--json"])
    data = json.loads(got.stdout)
    kv = next(t for t in data["trends"] if t["scenario"] == "kv-cache-shortage")
    assert [p["time_to_detect_s"] for p in kv["points"]] == [130.0, 129.0, 131.0]
    assert [p["recover_regressed"] for p in kv["points"]] == [False, False, True]


def test_history_html_has_a_chart_per_scenario(reports: Path, tmp_path: Path) -> None:
    page = tmp_path / "out" / "history.html"
    got = CliRunner().invoke(main, ["history", "--reports", str(reports), "--html", str(page)])
    assert got.exit_code == 0, got.output
    html = page.read_text()
    assert html.count("<svg ") == 2
    assert html.count('class="regression"') == 1
    assert "<title>20260103T000000Z-cccccc: time to recover 400.0 s [4.000 s lab]</title>" in html
    assert html.count('<tr class="regressed">') == 1


def test_no_run_of_the_scenario_is_input_error(reports: Path) -> None:
    got = CliRunner().invoke(main, ["history", "nope", "--reports", str(reports)])
    assert got.exit_code == 2
    assert "no run of scenario 'nope' in 3 readable run(s)" in got.stderr


def test_no_readable_run_is_input_error(tmp_path: Path) -> None:
    for run_id in ("20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb"):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "result.json").write_text("{")
    got = CliRunner().invoke(main, ["history", "--reports", str(tmp_path)])
    assert got.exit_code == 2, got.output
    assert got.stderr == (
        f"error: {tmp_path}: no run could be read (2 run folder(s)); the first: "
        f"{tmp_path}/20260101T000000Z-aaaaaa/result.json: not a gameday result: Expecting "
        "property name enclosed in double quotes: line 1 column 2 (char 1)\n"
        "  hint: gameday run first, or remove the broken run folders\n"
    )
    assert got.stdout == ""


def test_history_html_when_every_time_is_zero(tmp_path: Path) -> None:
    zero = scenario_result(
        "z",
        id="kv-cache-shortage",
        verdict=Verdict.PASSED,
        time_to_fail_s=0.0,
        time_to_detect_s=0.0,
        time_to_recover_s=0.0,
    )
    write_reports(run_result(zero, run_id="20260101T000000Z-aaaaaa"), tmp_path / "r")
    got = CliRunner().invoke(main, ["history", "--reports", str(tmp_path), "--html", "-"])
    assert got.exit_code == 0, got.output
    assert got.stdout.count("<svg ") == 1
    title = "<title>20260101T000000Z-aaaaaa: time to recover 0.0 s [0.000 s lab]</title>"
    assert title in got.stdout
    (trend,) = load_history(tmp_path).trends
    assert chart(trend).y_max == 1.0


def drill_of(ttr_wall: float) -> ScenarioResult:
    record = DrillRecord(
        handed_over_at=NOW,
        time_to_detect_s=5.9,
        time_to_recover_s=ttr_wall,
        outcome=DrillOutcome.RECOVERED,
        recover_within_s=1800.0,
        time_scale=100.0,
    )
    return scenario_result(
        "d",
        id="head-only-restart",
        verdict=Verdict.PASSED,
        time_to_fail_s=150.0,
        time_to_detect_s=590.0,  # the system's: the first alert fired after 5.9 wall s at x100
        time_to_recover_s=ttr_wall,  # the people's, as they are
        drill=record,
    )


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """head-only-restart as a run, a person's drill, a seat's drill, a run, a drill: oldest
    first. The people took far longer than gameday's runbook."""
    runs = [  # run id, mode, scenario
        ("20260101T000000Z-aaaaaa", RunMode.RUN, 300.0),
        ("20260102T000000Z-bbbbbb", RunMode.DRILL, 146.0),
        ("20260103T000000Z-cccccc", RunMode.SEAT, 90.0),
        ("20260104T000000Z-dddddd", RunMode.RUN, 310.0),
        ("20260105T000000Z-eeeeee", RunMode.DRILL, 200.0),
    ]
    for day, (run_id, mode, ttr) in enumerate(runs):
        s = (
            scenario_result(
                "r",
                id="head-only-restart",
                verdict=Verdict.PASSED,
                time_to_fail_s=150.0,
                time_to_recover_s=ttr,
            )
            if mode is RunMode.RUN
            else drill_of(ttr)
        )
        result = run_result(s, run_id=run_id, started_at=NOW + timedelta(days=day), mode=mode)
        write_reports(result, tmp_path / run_id)
    return tmp_path


def test_history_compares_a_run_with_runs_and_a_drill_with_drills(mixed: Path) -> None:
    (trend,) = load_history(mixed).trends
    assert [(p.mode, p.time_to_recover_s) for p in trend.points] == [
        (RunMode.RUN, 300.0),
        (RunMode.DRILL, 146.0),  # the people's wall seconds
        (RunMode.SEAT, 90.0),
        (RunMode.RUN, 310.0),
        (RunMode.DRILL, 200.0),
    ]
    changes = [p.change_s.get(Measure.RECOVER) for p in trend.points]
    assert changes == [None, None, None, 10.0, 54.0]  # each against the one of its mode
    # the run after a drill is no regression of the drill's; the second drill is the first's
    assert [p.recover_regressed for p in trend.points] == [False, False, False, False, True]


def test_history_shows_the_mode_and_each_figure_s_clock(
    mixed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "out", output._Console(width=200, soft_wrap=True))
    got = CliRunner().invoke(main, ["history", "--reports", str(mixed)])
    assert got.exit_code == 0, got.output
    rows = [
        [c.strip() for c in ln.split("│")[1:-1]] for ln in got.stdout.splitlines() if "Z-" in ln
    ]
    assert [r[1] for r in rows] == ["run", "drill", "seat", "run", "drill"]
    assert rows[3][-1] == "310.0 s [3.100 s lab] (+10.0 s)"
    assert rows[4][-1] == "200.0 s wall (+54.0 s wall) REGRESSED"
    # detect: the system's, real-world (the first alert fires on the lab's clock)
    assert rows[4][-2] == "590.0 s [5.900 s lab] (+0.0 s)"
    assert rows[4][-3] == "150.0 s [1.500 s lab] (+0.0 s)"  # fail: the system's, real-world


def test_history_at_80_columns_is_a_block_per_run_nothing_folded(
    mixed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "out", output._Console(width=80, soft_wrap=True))
    got = CliRunner().invoke(main, ["history", "--reports", str(mixed)])
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    assert "│" not in got.stdout and "┃" not in got.stdout
    assert max(len(line) for line in lines) <= 80
    assert lines[0] == "head-only-restart: 5 run(s)"
    last = lines[lines.index("20260105T000000Z-eeeeee  drill  passed") :]
    assert last == [
        "20260105T000000Z-eeeeee  drill  passed",
        "  time to fail    150.0 s [1.500 s lab] (+0.0 s)",
        "  time to detect  590.0 s [5.900 s lab] (+0.0 s)",
        "  time to recover 200.0 s wall (+54.0 s wall) REGRESSED",
    ]
    assert "20260104T000000Z-dddddd  run  passed" in lines


def test_history_html_has_the_mode_and_one_unit_on_the_chart(mixed: Path) -> None:
    (trend,) = load_history(mixed).trends
    recover = next(s for s in chart(trend).series if s.label == "time to recover")
    tips = [tip for _x, _y, tip in recover.points]
    assert tips[1] == "20260102T000000Z-bbbbbb (drill): time to recover 146.0 s wall"
    # a person's wall seconds are real-world seconds: on the axis as they are (146 < 300)
    ys = {tip.split(":")[0]: y for _x, y, tip in recover.points}
    assert ys["20260101T000000Z-aaaaaa"] < ys["20260102T000000Z-bbbbbb (drill)"]
    got = CliRunner().invoke(main, ["history", "--reports", str(mixed), "--html", "-"])
    assert got.stdout.count("<td>drill</td>") == 2 and got.stdout.count("<td>seat</td>") == 1


def test_an_older_drill_without_a_mode_is_a_drill_in_history(tmp_path: Path) -> None:
    result = run_result(drill_of(146.0), run_id="20260101T000000Z-aaaaaa")
    data = json.loads(result.model_dump_json())
    del data["mode"]
    del data["scenarios"][0]["drill"]["time_scale"]
    data["scenarios"][0]["time_to_detect_s"] = 5.9  # wall seconds, as drills wrote it then
    (tmp_path / "20260101T000000Z-aaaaaa").mkdir()
    (tmp_path / "20260101T000000Z-aaaaaa" / "result.json").write_text(json.dumps(data))
    (trend,) = load_history(tmp_path).trends
    assert [(p.mode, p.time_to_recover_s) for p in trend.points] == [(RunMode.DRILL, 146.0)]
    assert trend.points[0].time_to_detect_s == pytest.approx(590.0)  # the system's: converted


def test_a_run_gameday_could_not_carry_out_is_no_regression(tmp_path: Path) -> None:
    """An interrupted run (a cancelled CI job) or a lab error has no time to recover: it measured
    none, so it is not flagged REGRESSED against the run before; a failed run still is."""
    for day, (verdict, ttr) in enumerate(
        [(Verdict.PASSED, 300.0), (Verdict.ERROR, None), (Verdict.FAILED, None)]
    ):
        run_id = f"2026010{day + 1}T000000Z-{'abc'[day] * 6}"
        s = scenario_result("kv", id="kv", verdict=verdict, time_to_recover_s=ttr)
        started = NOW + timedelta(days=day)
        write_reports(run_result(s, run_id=run_id, started_at=started), tmp_path / run_id)
    (trend,) = load_history(tmp_path).trends
    assert [p.recover_regressed for p in trend.points] == [False, False, True]


def _loaded_runs(tmp_path: Path, sid: str, impacts: list[ImpactFigures]) -> None:
    """One run a day of scenario `sid`, each with the load's figures `impacts` gives in turn."""
    for day, impact in enumerate(impacts):
        s = scenario_result(sid, id=sid, verdict=Verdict.PASSED, impact=impact)
        run_id = f"2026010{day + 1}T000000Z-{sid[:4]}{day}"
        write_reports(
            run_result(s, run_id=run_id, started_at=NOW + timedelta(days=day)), tmp_path / run_id
        )


def test_a_scenario_with_a_load_shows_its_fault_error_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    impacts = [
        ImpactFigures(
            mode="open",
            rate=20,
            node="node1",
            phases=[
                PhaseFigures(phase="baseline", sent=20, failed=0, error_rate=0.0),
                PhaseFigures(phase="fault", sent=20, failed=int(rate * 20), error_rate=rate),
            ],
        )
        for rate in (0.95, 0.5)
    ]
    _loaded_runs(tmp_path, "head-only-restart", impacts)
    (trend,) = load_history(tmp_path).trends
    assert [p.fault_error_rate for p in trend.points] == [0.95, 0.5]
    monkeypatch.setattr(output, "out", output._Console(width=200, soft_wrap=True))
    got = CliRunner().invoke(main, ["history", "--reports", str(tmp_path)])
    assert "fault errors" in got.stdout
    rows = [line for line in got.stdout.splitlines() if "Z-" in line]
    assert rows[0].rstrip(" │").endswith("95.0%") and rows[1].rstrip(" │").endswith("50.0%")


def test_a_rate_at_a_share_of_the_load_says_the_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    impacts = [
        ImpactFigures(
            mode="open",
            rate=10 * scale,
            load_scale=scale,
            node="node1",
            phases=[PhaseFigures(phase="fault", sent=20, failed=19, error_rate=0.95)],
        )
        for scale in (1.0, 0.3)
    ]
    _loaded_runs(tmp_path, "kv-cache-shortage", impacts)
    (trend,) = load_history(tmp_path).trends
    assert [p.load_scale for p in trend.points] == [1.0, 0.3]
    monkeypatch.setattr(output, "out", output._Console(width=200, soft_wrap=True))
    got = CliRunner().invoke(main, ["history", "--reports", str(tmp_path)])
    rows = [line for line in got.stdout.splitlines() if "Z-" in line]
    assert rows[0].rstrip(" │").endswith("95.0%")
    assert rows[1].rstrip(" │").endswith("95.0% (load_scale 0.3)")
    got = json.loads(
        CliRunner().invoke(main, ["history", "--reports", str(tmp_path), "--json"]).stdout
    )
    assert [p["load_scale"] for p in got["trends"][0]["points"]] == [1.0, 0.3]
