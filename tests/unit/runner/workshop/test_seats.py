"""Workshop seats: --seats parsing and limits, a seat's inventory file, the workshop folder, and
the seat card's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import InputError, LabError
from runner.run.parallel import instance
from runner.spec.inventory_load import load_inventory
from runner.workshop.cards import Seat, restart_group, seat_card
from runner.workshop.seats import (
    MAX_SEATS,
    check_seats,
    create_workshop,
    load_workshop,
    parse_seats,
)

ROOT = Path(__file__).resolve().parents[4]
LOCAL = ROOT / "inventories" / "local.yaml"
COMPOSE = ROOT / "inventories" / "compose.yaml"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    return tmp_path


def test_seats_all_or_numbers() -> None:
    assert parse_seats("all", 4) == [1, 2, 3, 4]
    assert parse_seats("3,1", 4) == [1, 3]
    assert parse_seats(" 2 ", 2) == [2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "there is no seat 0: seats are 1..3"),
        ("4", "there is no seat 4: seats are 1..3"),
        ("1,1", "seat 1 is named twice"),
        ("1,x", "--seats takes 'all' or seat numbers like 1,3; not 'x'"),
        ("", "--seats takes 'all' or seat numbers like 1,3; not ''"),
        ("-1", "--seats takes 'all' or seat numbers like 1,3; not '-1'"),
    ],
)
def test_bad_seats_are_one_clear_message(text: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_seats(text, 3)
    assert exc.value.message == f"[--seats]: {message}"
    assert exc.value.field == "--seats"


def test_seat_count_limits() -> None:
    inv = load_inventory(LOCAL)
    for n in (0, MAX_SEATS + 1):
        with pytest.raises(InputError) as exc:
            check_seats(inv, n)
        assert exc.value.message == f"[--seats]: --seats must be 1..32, not {n}"
        assert exc.value.exit_code == 2
    check_seats(inv, MAX_SEATS)
    check_seats(load_inventory(COMPOSE), MAX_SEATS)  # 33 instances fit below x.x.254.0/24


def test_a_local_seat_inventory_is_the_parallel_instance_in_a_file(state: Path) -> None:
    inv = load_inventory(LOCAL)
    ws = create_workshop(inv, 2, 8700)
    assert ws.folder == state / "workshop" / "local"
    assert sorted(p.name for p in ws.folder.iterdir()) == [
        "seat-1.token",
        "seat-1.yaml",
        "seat-2.token",
        "seat-2.yaml",
        "workshop.json",
    ]
    seat = ws.seat(2)
    assert seat.path == state / "workshop" / "local" / "seat-2.yaml"
    assert seat.lab.name == "local-p2"
    want = instance(inv, 2)
    # the instance's lab, with its state directory written out (an attendee's shell has not the
    # facilitator's GAMEDAY_STATE_DIR)
    assert seat.lab == want.lab.model_copy(update={"state_dir": str(state / "local-p2")})
    assert seat.nodes == want.nodes
    assert seat.node("node2").args[8] == "127.2.81.1"  # --master-addr moved with the group
    assert ws.page_url(2) == f"http://127.0.0.1:8702/responder/{ws.token(2)}/"
    assert ws.drill_dir(2) == state / "local-p2" / "drill"
    assert (ws.folder / "seat-2.yaml").stat().st_mode & 0o777 == 0o600


def test_a_workshop_is_up_once_and_found_by_its_lab(state: Path) -> None:
    inv = load_inventory(LOCAL)
    with pytest.raises(LabError) as none:
        load_workshop(inv)
    assert none.value.message == "no workshop of lab 'local' is up"
    assert none.value.exit_code == 3
    create_workshop(inv, 3, 9000)
    ws = load_workshop(inv)
    assert ws.seats == [1, 2, 3]
    assert ws.manifest.inventory == str(LOCAL)
    assert ws.manifest.page_base == 9000
    with pytest.raises(InputError, match="a workshop of lab 'local' is already up"):
        create_workshop(inv, 1, 8700)


def test_the_group_a_card_restarts_is_the_largest() -> None:
    assert restart_group(load_inventory(LOCAL)) == "tp_group"


def test_seat_card_text(state: Path) -> None:
    inv = create_workshop(load_inventory(LOCAL), 3, 8700).seat(3)
    urls = {n.name: f"http://{n.address}:{n.port}" for n in inv.nodes}
    card = seat_card(Seat(3, inv, "/w/seat-3.yaml", urls, "http://127.0.0.1:8703/"))
    assert card == (
        "# Seat 3: lab local-p3 (local)\n"
        "\n"
        "Your lab's nodes:\n"
        "\n"
        "    serving  http://127.3.77.10:8000\n"
        "    node1    http://127.3.81.1:8000\n"
        "    node2    http://127.3.81.2:8000\n"
        "    node3    http://127.3.81.3:8000\n"
        "    node4    http://127.3.81.4:8000\n"
        "\n"
        "In your terminal, first:\n"
        "\n"
        "    export GAMEDAY_LAB=/w/seat-3.yaml\n"
        "\n"
        "Then, to look and to act:\n"
        "\n"
        "    gameday lab ps                      # every node's state\n"
        "    gameday lab logs serving            # a node's log (--previous, -f)\n"
        "    gameday lab restart serving         # one node\n"
        "    gameday lab restart tp_group        # a group, together\n"
        "    gameday lab stop serving / gameday lab start serving\n"
        "    gameday drill ack                   # you are on it\n"
        "    gameday drill hint                  # the next hint\n"
        "\n"
        "Your drill's page, once the drill runs: http://127.0.0.1:8703/\n"
    )


def test_start_refuses_before_any_drill(state: Path) -> None:
    from click.testing import CliRunner

    from runner.cli.main import main

    create_workshop(load_inventory(LOCAL), 2, 8700)
    run = CliRunner()
    lab = ["--lab", str(LOCAL)]
    r = run.invoke(main, ["workshop", "start", "head-only-restart", "--seats", "3", *lab])
    assert (r.exit_code, r.stderr) == (2, "error: [--seats]: there is no seat 3: seats are 1..2\n")
    r = run.invoke(main, ["workshop", "start", str(ROOT / "scenarios"), *lab])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: [SCENARIO]: a workshop drills one scenario; ")
    assert sorted(p.name for p in (state / "workshop" / "local").iterdir()) == [
        "seat-1.token",
        "seat-1.yaml",
        "seat-2.token",
        "seat-2.yaml",
        "workshop.json",
    ]
