"""The summary `workshop down` writes (per seat: acknowledged, recovered, hints, shortcuts; as
Markdown and HTML, every scenario's and seat's word escaped), even for seats that never finished;
`down` that still takes the seats down when the summary cannot be written; the seats' reports out
of the team's history; and `workshop status` on an 80-column terminal."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import output
from runner.cli.main import main
from runner.drill.model import DrillPhase, DrillStatus, UsersView
from runner.results.drill_record import ActionKind, HintView, ObservedAction
from runner.results.rundirs import run_dirs
from runner.results.schema import DrillOutcome, ImpactFigures, PhaseFigures, load_result
from runner.results.trends import load_history
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import Outcome
from runner.workshop.drills import drill_argv
from runner.workshop.seats import Workshop, create_workshop, load_workshop
from runner.workshop.summary import html, markdown, summarise, write_summary

ROOT = Path(__file__).resolve().parents[4]
LOCAL = ROOT / "inventories" / "local.yaml"
DRILL_RESULT = ROOT / "tests" / "data" / "report" / "drill-failed.json"
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
EVIL = "<script>alert(1)</script> | *x*"

STEP = "Restart the head alone (what `--restart always` would do)"
SHORTCUT = ObservedAction(
    at_s=41.5,
    kind=ActionKind.RESTART,
    nodes=("node1",),
    detail="node1 restarted",
    step=STEP,
    outcome=Outcome.DOES_NOT_RESTORE,
    shortcut=True,
    why="the workers never rejoin",
)
FIX = ObservedAction(
    at_s=80.0,
    kind=ActionKind.GROUP_RESTART,
    nodes=("node1", "node2"),
    detail="tp_group restarted",
    step="restart the group",
    outcome=Outcome.RESTORES,
)


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def ws(tmp_path: Path) -> Workshop:
    return create_workshop(load_inventory(LOCAL), 3, 8700, tmp_path / "reports")


def write_status(ws: Workshop, k: int, **kw: object) -> None:
    base: dict[str, object] = {
        "scenario": "head-only-restart",
        "title": "Head restarted alone",
        "lab": f"local-p{k}",
        "seat": k,
        "phase": DrillPhase.HANDED_OVER,
        "started_at": T0,
    }
    folder = ws.drill_dir(k)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status.json").write_text(DrillStatus.model_validate(base | kw).model_dump_json())


def write_result(
    ws: Workshop, k: int, run_id: str, impact: ImpactFigures | None = None, **drill: object
) -> Path:
    """A finished drill of seat k in the workshop's reports folder, as the drill writes it."""
    r = load_result(DRILL_RESULT)
    s = r.scenarios[0]
    assert s.drill is not None
    s = s.model_copy(
        update={"lab": f"local-p{k}", "drill": s.drill.model_copy(update=drill), "impact": impact}
    )
    r = r.model_copy(
        update={"run_id": run_id, "lab": r.lab.model_copy(update={"name": f"local-p{k}"}),
                "scenarios": [s]}
    )  # fmt: skip
    assert ws.manifest.reports is not None
    run_dir = Path(ws.manifest.reports) / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(r.model_dump_json())
    return run_dir


def three_seats(ws: Workshop) -> None:
    """Seat 1 recovered (its drill finished: a result), seat 2 still handed over when the
    workshop ended (its drill killed: only its status), seat 3 never drilled."""
    write_result(
        ws, 1, "20261202T100000Z-aaaaaa",
        outcome=DrillOutcome.RECOVERED, time_to_acknowledge_s=12.0, time_to_recover_s=95.0,
        hints=[HintView(index=1, text="look at node2's log", at_s=30.0, requested=True)],
        actions=[SHORTCUT, FIX], shortcuts=[SHORTCUT],
    )  # fmt: skip
    write_status(ws, 1, phase=DrillPhase.DONE, recovered_at_s=95.0)
    write_status(ws, 2, acked_at_s=20.0, actions=(SHORTCUT,), clock_s=300.0)


def test_every_seat_has_its_row_finished_or_not(ws: Workshop) -> None:
    three_seats(ws)
    assert ws.manifest.reports is not None
    s = summarise(ws, Path(ws.manifest.reports), now=T0)
    rows = [
        (d.seat, d.scenario, d.outcome, d.finished, d.acked_at_s, d.recovered_at_s,
         len(d.hints), [a.step for a in d.shortcuts])
        for d in s.drills
    ]  # fmt: skip
    assert rows == [
        (1, "head-only-restart", "recovered", True, 12.0, 95.0, 1, [STEP]),
        (2, "head-only-restart", "unfinished (handed over)", False, 20.0, None, 0, [STEP]),
        (3, None, "no drill", False, None, None, 0, []),
    ]
    assert s.drills[0].report == "20261202T100000Z-aaaaaa/report.html"


def test_a_seat_drilled_twice_has_both_and_a_killed_drill_its_last_status(ws: Workshop) -> None:
    write_result(ws, 1, "20261202T100000Z-aaaaaa", outcome=DrillOutcome.TIMED_OUT)
    write_status(ws, 1, scenario="kv-cache-shortage", phase=DrillPhase.CLEANUP)
    assert ws.manifest.reports is not None
    s = summarise(ws, Path(ws.manifest.reports), now=T0)
    assert [(d.seat, d.scenario, d.outcome) for d in s.drills if d.seat == 1] == [
        (1, "head-only-restart", "timed out"),
        (1, "kv-cache-shortage", "unfinished (cleanup)"),
    ]


def test_what_users_felt_while_people_worked_is_each_seats(ws: Workshop, tmp_path: Path) -> None:
    """A finished drill's requests of its fault phase (from the fault in place until service was
    back), an unfinished one's as its page last showed them; `-` for a seat with no load."""
    phases = [
        PhaseFigures(phase="baseline", sent=40, failed=0, error_rate=0.0),
        PhaseFigures(phase="fault", sent=300, failed=212, error_rate=212 / 300),
        PhaseFigures(phase="verify", sent=20, failed=0, error_rate=0.0),
    ]
    impact = ImpactFigures(mode="open", rate=10.0, node="node1", phases=phases)
    write_result(ws, 1, "20261202T100000Z-aaaaaa", impact, outcome=DrillOutcome.RECOVERED)
    write_status(ws, 1, phase=DrillPhase.DONE, recovered_at_s=95.0)
    users = UsersView(fault_sent=50, fault_failed=50, window_s=10.0, bin_s=1.0)
    write_status(ws, 2, users=users)
    assert ws.manifest.reports is not None
    s = summarise(ws, Path(ws.manifest.reports), now=T0)
    assert [(d.seat, d.users_sent, d.users_failed) for d in s.drills] == [
        (1, 300, 212),
        (2, 50, 50),
        (3, None, None),
    ]
    text = markdown(s)
    assert "| shortcuts tried | users failed |" in text
    assert "| 212 of 300 |" in text and "| 50 of 50 |" in text
    assert "- users' requests failed while people worked: 212 of 300" in text
    page = html(s)
    assert "<th>users failed</th>" in page and '<td class="users">212 of 300</td>' in page


def test_without_a_load_there_is_no_users_column(ws: Workshop) -> None:
    three_seats(ws)
    assert ws.manifest.reports is not None
    s = summarise(ws, Path(ws.manifest.reports), now=T0)
    assert "users failed" not in markdown(s) and "users failed" not in html(s)


def test_markdown_and_html_are_written_with_each_seat(ws: Workshop, tmp_path: Path) -> None:
    three_seats(ws)
    assert ws.manifest.reports is not None
    folder = Path(ws.manifest.reports)
    written = write_summary(summarise(ws, folder, now=T0), folder)
    assert [p.name for p in written] == ["summary.md", "summary.html"]
    md = (folder / "summary.md").read_text()
    assert "| 1 | local-p1 | head-only-restart | recovered | 0:12 | 1:35 | 1 | 1 |" in md
    assert "| 2 | local-p2 | head-only-restart | unfinished (handed over) | 0:20 | - | 0 | 1 |" in (
        md
    )
    assert "| 3 | local-p3 | - | no drill | - | - | 0 | 0 |" in md
    assert "  - 0:30 hint 1 (asked): look at node2's log" in md
    assert "- the drill did not finish: this is its last status" in md
    page = (folder / "summary.html").read_text()
    assert page.count('<tr class="seat"') == 3
    assert "0:41 Restart the head alone (what `--restart always` would do): the workers" in page


def test_words_from_a_scenario_or_a_seat_are_escaped(ws: Workshop, tmp_path: Path) -> None:
    evil = SHORTCUT.model_copy(update={"step": EVIL, "why": EVIL})
    write_status(
        ws, 1, title=EVIL, actions=(evil,),
        hints=(HintView(index=1, text=EVIL, at_s=1.0, requested=False),),
    )  # fmt: skip
    s = summarise(ws, tmp_path / "none", now=T0)
    page = html(s)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; | *x*" in page
    md = markdown(s)
    assert "<script>" not in md and "| *x*" not in md
    assert r"\<script\>alert(1)\</script\> \| \*x\*" in md


def down(tmp_path: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["workshop", "down", "--lab", str(LOCAL), *args])
    return r.exit_code, r.output


def test_down_writes_the_summary_and_says_where(ws: Workshop, tmp_path: Path) -> None:
    three_seats(ws)
    code, err = down(tmp_path)
    assert code == 0, err
    assert ws.manifest.reports is not None
    folder = Path(ws.manifest.reports)
    assert f"workshop summary: {folder}/ (summary.md, summary.html)" in err.replace("\n", "")
    assert "| 2 | local-p2 |" in (folder / "summary.md").read_text()
    assert not ws.folder.exists()


def test_down_takes_the_seats_down_when_the_summary_cannot_be_written(
    ws: Workshop, tmp_path: Path
) -> None:
    assert ws.manifest.reports is not None
    Path(ws.manifest.reports).parent.mkdir(parents=True)
    Path(ws.manifest.reports).write_text("a file where the folder would be")
    code, err = down(tmp_path)
    assert code == 0, err
    assert "error: workshop summary not written to" in err
    assert "the seats are taken down all the same" in err
    assert "is down: nothing of it is left" in err
    assert not ws.folder.exists()


def test_seat_drills_report_to_the_workshops_folder_out_of_the_teams_history(
    ws: Workshop, tmp_path: Path
) -> None:
    team = tmp_path / "reports"
    assert ws.manifest.reports is not None
    assert re.fullmatch(
        re.escape(str(team.resolve())) + r"/workshops/local-\d{8}T\d{6}Z", ws.manifest.reports
    )
    argv = drill_argv(ws, 2, "head-only-restart")
    assert argv[-2:] == ["--reports", ws.manifest.reports]
    write_result(ws, 1, "20261202T100000Z-aaaaaa")
    assert run_dirs(team) == []  # `gameday history` of the team's runs does not see it
    asked = load_history(Path(ws.manifest.reports))
    assert [(t.scenario, len(t.points)) for t in asked.trends] == [("head-only-restart", 1)]
    # as the manual shows it: `gameday history --reports <that folder>`
    r = CliRunner().invoke(main, ["history", "--reports", ws.manifest.reports, "--json"])
    assert r.exit_code == 0, r.output
    assert '"scenario": "head-only-restart"' in r.output
    assert load_workshop(load_inventory(LOCAL)).manifest == ws.manifest


def status_at(width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(output, "out", output._Console(file=buf, width=width, soft_wrap=True))
    r = CliRunner().invoke(main, ["workshop", "status", "--lab", str(LOCAL)])
    assert r.exit_code == 0, r.output
    return buf.getvalue()


def test_status_on_80_columns_is_a_block_per_seat_with_no_word_folded(
    ws: Workshop, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_status(ws, 1, acked_at_s=20.0, actions=(SHORTCUT,), clock_s=125.0,
                 hints=(HintView(index=1, text="h", at_s=3.0, requested=True),))  # fmt: skip
    write_status(ws, 2, scenario="context-window-overflow-with-a-long-name", clock_s=5.0)
    text = status_at(80, monkeypatch)
    lines = [line.rstrip() for line in text.splitlines()]  # a grid pads its cells
    assert all(len(line) <= 80 for line in lines), text
    for whole in (
        "head-only-restart",
        "context-window-overflow-with-a-long-name",
        "handed_over",
        STEP,
    ):
        assert whole in text, (whole, text)
    assert "seat 1  local-p1  handed_over" in lines
    assert "  shortcut      " + STEP in lines
    assert "  acked at      0:20" in lines
    assert "seat 3  local-p3  down" in lines


def test_status_on_a_wide_terminal_is_still_the_table(
    ws: Workshop, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_status(ws, 1, acked_at_s=20.0, actions=(SHORTCUT,), clock_s=125.0)
    text = status_at(200, monkeypatch)
    assert "┃ seat ┃" in text
    assert STEP in text
