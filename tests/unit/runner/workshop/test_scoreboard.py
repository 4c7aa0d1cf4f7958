"""The scoreboard's rows from the seats' drill status files (written here by hand, as a drill
writes them), and the facilitator page's server push: a changed status.json reaches an open
event stream without the page asking."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from runner.drill.model import DrillPhase, DrillStatus
from runner.results.drill_record import ActionKind, HintView, ObservedAction
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import Outcome
from runner.workshop.board_server import Feed, start_server
from runner.workshop.scoreboard import SeatRow, scoreboard, seat_row, status_files
from runner.workshop.seats import create_workshop

ROOT = Path(__file__).resolve().parents[4]
LOCAL = ROOT / "inventories" / "local.yaml"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    return tmp_path


def status(**kw: object) -> DrillStatus:
    base: dict[str, object] = {
        "scenario": "head-only-restart",
        "title": "Head restarted alone",
        "lab": "local-p1",
        "seat": 1,
        "phase": DrillPhase.HANDED_OVER,
        "started_at": T0,
    }
    return DrillStatus.model_validate(base | kw)


def write(folder: Path, st: DrillStatus) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status.json").write_text(st.model_dump_json())


SHORTCUT = ObservedAction(
    at_s=41.5,
    kind=ActionKind.RESTART,
    nodes=("node1",),
    detail="node1 restarted",
    step="restart the head alone",
    outcome=Outcome.DOES_NOT_RESTORE,
    shortcut=True,
    why="the workers never rejoin",
)
GROUP = ObservedAction(
    at_s=80.0,
    kind=ActionKind.GROUP_RESTART,
    nodes=("node1", "node2", "node3", "node4"),
    detail="tp_group restarted",
    step="restart the group",
    outcome=Outcome.RESTORES,
)


def test_a_seat_without_a_drill_is_idle_or_down(tmp_path: Path) -> None:
    assert seat_row(2, "local-p2", tmp_path / "none", up=True) == SeatRow(
        seat=2, lab="local-p2", state="idle"
    )
    assert seat_row(2, "local-p2", tmp_path / "none", up=False) == SeatRow(
        seat=2, lab="local-p2", state="down"
    )


def test_a_drill_that_exited_before_any_status_says_so(tmp_path: Path) -> None:
    assert seat_row(3, "local-p3", tmp_path / "none", up=True, failed_start=True) == SeatRow(
        seat=3, lab="local-p3", state="drill failed to start"
    )


def test_a_drilling_seat_shows_its_phase_hints_and_shortcuts(tmp_path: Path) -> None:
    hint = HintView(index=1, text="look at the workers", at_s=30.0, requested=True)
    write(
        tmp_path,
        status(
            clock_s=95.2,
            hints=(hint,),
            actions=(SHORTCUT,),
            acked_at_s=12.0,
            page_url="http://127.0.0.1:8701/",
        ),
    )
    assert seat_row(1, "local-p1", tmp_path, up=True, drill_pid=4242) == SeatRow(
        seat=1,
        lab="local-p1",
        state="handed_over",
        scenario="head-only-restart",
        elapsed_s=95.2,
        hints_used=1,
        shortcuts=("restart the head alone",),
        acked_at_s=12.0,
        recovered_at_s=None,
        page_url="http://127.0.0.1:8701/",
        drill_pid=4242,
    )


def test_a_recovered_seat_keeps_its_row_and_its_page_url_comes_from_server_json(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        status(
            phase=DrillPhase.DONE, clock_s=120.0, actions=(SHORTCUT, GROUP), recovered_at_s=98.5
        ),
    )
    (tmp_path / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:8703", "pid": 7}))
    row = seat_row(3, "local-p3", tmp_path, up=True)
    assert (row.state, row.shortcuts, row.recovered_at_s, row.page_url, row.drill_pid) == (
        "done",
        ("restart the head alone",),
        98.5,
        "http://127.0.0.1:8703",
        None,
    )


def test_the_scoreboard_of_a_workshop_whose_labs_are_not_up(state: Path) -> None:
    ws = create_workshop(load_inventory(LOCAL), 2, 8700)
    write(ws.drill_dir(2), status(lab="local-p2", seat=2, phase=DrillPhase.BASELINE))
    board = scoreboard(ws)
    assert board.lab == "local"
    assert [(r.seat, r.lab, r.state, r.scenario) for r in board.seats] == [
        (1, "local-p1", "down", None),
        (2, "local-p2", "baseline", "head-only-restart"),
    ]
    assert status_files(ws) == [
        state / "local-p1" / "drill" / "status.json",
        ws.folder / "seat-1.drill.json",
        state / "local-p2" / "drill" / "status.json",
        ws.folder / "seat-2.drill.json",
    ]


def test_the_page_is_pushed_a_new_scoreboard_when_a_status_file_changes(state: Path) -> None:
    ws = create_workshop(load_inventory(LOCAL), 2, 8700)
    token = ws.manifest.host_token
    handle = start_server(Feed(lambda: scoreboard(ws), lambda: status_files(ws)), 0, token)
    assert handle.url.endswith(f"/host/{token}/")
    boards: queue.Queue[dict[str, object]] = queue.Queue()

    def read() -> None:
        with (
            httpx.Client(timeout=10) as client,
            client.stream("GET", handle.url + "events") as resp,
            contextlib.suppress(httpx.RemoteProtocolError),  # the server stops mid-stream
        ):
            boards.put({"content-type": resp.headers["content-type"]})
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    boards.put(json.loads(line.removeprefix("data: ")))

    reader = threading.Thread(target=read, daemon=True)
    try:
        reader.start()
        assert boards.get(timeout=10) == {"content-type": "text/event-stream; charset=utf-8"}
        first = boards.get(timeout=10)
        assert [s["state"] for s in first["seats"]] == ["down", "down"]  # type: ignore[index]
        write(ws.drill_dir(1), status(clock_s=3.0, actions=(SHORTCUT,)))
        pushed = boards.get(timeout=5)
        assert [s["state"] for s in pushed["seats"]] == ["handed_over", "down"]  # type: ignore[index]
        assert pushed["seats"][0]["shortcuts"] == ["restart the head alone"]  # type: ignore[index]
        page = httpx.get(handle.url, timeout=5)
        assert page.status_code == 200
        assert 'new EventSource("events")' in page.text
        assert ("<link" in page.text, "src=" in page.text) == (False, False)  # self-contained
        # a request naming another host (DNS rebinding) is refused
        assert httpx.get(handle.url, headers={"Host": "evil.example"}).status_code == 400
    finally:
        handle.stop()


def test_the_board_links_each_seat_s_facilitator_view(tmp_path: Path) -> None:
    """The scoreboard is the facilitator's page: each seat's row carries its drill's facilitator
    address (server.json), and the page links it only in the shape a drill's server gives."""
    import re

    from runner.drill.server import FACILITATOR
    from runner.workshop.page import PAGE

    write(tmp_path, status(clock_s=5.0))
    url = "http://127.0.0.1:8702" + FACILITATOR.format(token="q5Zm-Tk_3xYwA1b2C3d4e5f6")
    (tmp_path / "server.json").write_text(
        json.dumps({"url": "http://127.0.0.1:8702", "facilitator_url": url, "pid": 7})
    )
    row = seat_row(2, "local-p2", tmp_path, up=True)
    assert (row.page_url, row.facilitator_url) == ("http://127.0.0.1:8702", url)
    # the page's own test of the address, read out of its script (JavaScript and Python agree
    # on this pattern's syntax)
    found = re.search(r"const view = /(\^http:.*facilitator.*\$)/;", PAGE)
    assert found is not None
    shape = re.compile(found.group(1))
    assert shape.match(url)
    for other in (
        "javascript:alert(1)//http://127.0.0.1:8702/facilitator/x/",
        "http://user@127.0.0.1:8702/facilitator/x/",
        "http://127.0.0.1:8702/facilitator/x/../../",
        "http://127.0.0.1:8702/",
        "http://127.0.0.1:8702/responder/x/",
    ):
        assert not shape.match(other), other
    # a seat whose drill wrote no facilitator address (an older drill) has none
    (tmp_path / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:8702", "pid": 7}))
    assert seat_row(2, "local-p2", tmp_path, up=True).facilitator_url is None


def test_a_seat_with_a_load_shows_the_requests_failed_since_the_fault(tmp_path: Path) -> None:
    from rich.console import Console

    from runner.drill.model import UsersView
    from runner.workshop.scoreboard import Scoreboard, table

    users = UsersView(
        sent=300, failed=120, fault_sent=200, fault_failed=120, window_s=10.0, bin_s=2.0
    )
    write(tmp_path / "a", status(clock_s=60.0, users=users))
    write(tmp_path / "b", status(clock_s=60.0))
    loaded = seat_row(1, "local-p1", tmp_path / "a", up=True)
    plain = seat_row(2, "local-p2", tmp_path / "b", up=True)
    assert (loaded.users_sent, loaded.users_failed) == (200, 120)
    assert (plain.users_sent, plain.users_failed) == (None, None)
    console = Console(width=200, record=True)
    console.print(table(Scoreboard(lab="local", at=T0, seats=(loaded, plain))))
    out = console.export_text()
    assert "users failed" in out and "120 of 200" in out
    console = Console(width=200, record=True)
    console.print(table(Scoreboard(lab="local", at=T0, seats=(plain,))))
    assert "users failed" not in console.export_text()  # no seat has a load: no column


def test_a_narrow_terminal_s_block_per_seat_says_the_users_failed_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from runner.cli import output
    from runner.cli.workshop import print_board
    from runner.drill.model import UsersView
    from runner.workshop.scoreboard import Scoreboard, table

    users = UsersView(sent=50, failed=7, fault_sent=30, fault_failed=7, window_s=10.0, bin_s=2.0)
    write(tmp_path, status(clock_s=60.0, users=users))
    board = Scoreboard(lab="local", at=T0, seats=(seat_row(1, "local-p1", tmp_path, up=True),))
    narrow = Console(width=50, record=True)
    monkeypatch.setattr(output, "out", narrow)
    print_board(board, table(board))
    lines = [" ".join(ln.split()) for ln in narrow.export_text().splitlines()]
    assert "users failed 7 of 30" in lines
