"""Who reaches a workshop's seats: each seat's own token (0600, on its card, handed to its drill
by file and never on a command line), the address the pages listen on (loopback unless named,
never a wildcard), the attendees' names, the printable cards, and the host page behind its
token."""

from __future__ import annotations

import html
import json
import os
import re
import stat
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from runner.cli.main import main
from runner.errors import InputError
from runner.spec.inventory_load import load_inventory
from runner.workshop.board_server import Feed, start_server
from runner.workshop.cards import Seat, cards_page, qr_code, seat_card
from runner.workshop.drills import drill_argv
from runner.workshop.scoreboard import scoreboard, status_files
from runner.workshop.seats import Listen, create_workshop, read_attendees

ROOT = Path(__file__).resolve().parents[4]
LOCAL = ROOT / "inventories" / "local.yaml"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    return tmp_path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_each_seat_has_a_token_of_its_own_owner_only(state: Path) -> None:
    ws = create_workshop(load_inventory(LOCAL), 3, 8700)
    tokens = [ws.token(k) for k in ws.seats]
    assert len(set(tokens)) == 3 and all(len(t) >= 24 for t in tokens)
    assert [mode(ws.token_path(k)) for k in ws.seats] == [0o600] * 3
    assert mode(ws.folder) == 0o700 and mode(ws.folder / "workshop.json") == 0o600
    assert ws.manifest.host_token not in tokens and len(ws.manifest.host_token) >= 24
    for k in ws.seats:
        assert ws.page_url(k) == f"http://127.0.0.1:{8700 + k}/responder/{tokens[k - 1]}/"


def test_a_seat_s_drill_reads_its_token_from_its_file_never_from_its_argv(state: Path) -> None:
    """A command line is every local user's to read (/proc/<pid>/cmdline): the token goes by a
    0600 file."""
    ws = create_workshop(load_inventory(LOCAL), 2, 8700, listen=Listen("127.0.0.2", "lab.test"))
    argv = drill_argv(ws, 2, "head-only-restart")
    assert ws.token(2) not in " ".join(argv)
    at = argv.index("--token-file")
    assert argv[at + 1] == str(ws.token_path(2))
    assert argv[argv.index("--listen") + 1] == "127.0.0.2"
    assert argv[argv.index("--public-name") + 1] == "lab.test"
    assert ws.page_url(2) == f"http://lab.test:8702/responder/{ws.token(2)}/"


def test_the_card_gives_the_page_the_token_and_the_attendee(state: Path) -> None:
    ws = create_workshop(load_inventory(LOCAL), 2, 8700, attendees=("Ada Lovelace",))
    inv = ws.seat(1)
    seat = Seat(
        1,
        inv,
        "/w/seat-1.yaml",
        {"serving": "http://x:1"},
        ws.page_url(1),
        ws.token(1),
        ws.attendee(1),
    )
    card = seat_card(seat)
    assert card.startswith("# Seat 1: lab local-p1 (local)\n\nAttendee: Ada Lovelace\n\n")
    assert card.endswith(
        f"Your drill's page, once the drill runs: {ws.page_url(1)}\n"
        "\n"
        f"Or open http://127.0.0.1:8701/ and type your seat's token: {ws.token(1)}\n"
        "\n"
        "Keep the token to yourself: whoever holds it acts on your drill.\n"
    )
    assert ws.attendee(2) is None


def test_the_printable_cards_are_one_page_with_every_seat_its_name_escaped(state: Path) -> None:
    names = ("<b>Eve</b> & co", "Bob")
    ws = create_workshop(load_inventory(LOCAL), 2, 8700, attendees=names)
    seats = [
        Seat(
            k,
            ws.seat(k),
            str(ws.seat_path(k)),
            {"serving": "http://x:1"},
            ws.page_url(k),
            ws.token(k),
            ws.attendee(k),
        )
        for k in ws.seats
    ]
    page = cards_page(seats, "local")
    assert page.count('<section class="card"') == 2
    assert "&lt;b&gt;Eve&lt;/b&gt; &amp; co" in page and "<b>Eve" not in page
    for k in ws.seats:
        assert ws.page_url(k) in page and ws.token(k) in page
    assert "http" not in page.split("<body>")[0]  # no external asset
    # each card's QR code is its own page's address, embedded
    codes = re.findall(r'<img class="qr" src="([^"]+)"', page)
    assert len(codes) == 2 and codes[0] != codes[1]
    for k, code in zip(ws.seats, codes, strict=True):
        assert code.startswith("data:image/svg+xml")
        assert html.unescape(code) == qr_code(ws.page_url(k))


def test_attendees_one_a_line(tmp_path: Path) -> None:
    f = tmp_path / "names.txt"
    f.write_text("# the Tuesday group\nAda Lovelace\n\n  Grace   Hopper \n")
    assert read_attendees(f) == ("Ada Lovelace", "Grace Hopper")
    f.write_text("Ada\x1b[31m\n")
    with pytest.raises(InputError, match="line 1: a name is up to 80 printable characters"):
        read_attendees(f)
    with pytest.raises(InputError, match="3 attendees for 2 seat"):
        create_workshop(load_inventory(LOCAL), 2, 8700, attendees=("a", "b", "c"))


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("0.0.0.0", "--listen 0.0.0.0 is no one interface's address"),
        ("all", "--listen takes an IPv4 address of this machine, not 'all'"),
        ("192.0.2.77", "--listen 192.0.2.77: this machine cannot listen there"),
    ],
)
def test_up_refuses_a_wildcard_or_foreign_address_before_any_seat(
    state: Path, address: str, says: str
) -> None:
    r = CliRunner().invoke(
        main, ["workshop", "up", "--seats", "1", "--lab", str(LOCAL), "--listen", address]
    )
    assert r.exit_code == 2, r.output
    assert says in r.stderr
    assert not (state / "workshop").exists()


def test_the_host_page_needs_its_token_and_lists_every_seat_with_its_attendee(
    state: Path,
) -> None:
    ws = create_workshop(load_inventory(LOCAL), 2, 8700, attendees=("Ada", "Grace"))
    handle = start_server(
        Feed(lambda: scoreboard(ws), lambda: status_files(ws)), 0, ws.manifest.host_token
    )
    try:
        root = handle.url.split("/host/")[0] + "/"
        for url in (
            root,
            root + "events",
            root + "scoreboard.json",
            root + "host/" + "x" * 24 + "/",
            root + "host/" + "x" * 24 + "/scoreboard.json",
            root + f"host/{ws.token(1)}/scoreboard.json",  # a seat's token is not the host's
        ):
            assert httpx.get(url, timeout=5).status_code == 401, url
        board = None
        for _ in range(100):  # the feed's first board
            board = httpx.get(handle.url + "scoreboard.json", timeout=5).json()
            if board is not None:
                break
            time.sleep(0.05)
        assert board is not None
        assert [(s["seat"], s["attendee"], s["page_url"]) for s in board["seats"]] == [
            (1, "Ada", ws.page_url(1)),
            (2, "Grace", ws.page_url(2)),
        ]
        page = httpx.get(handle.url, timeout=5)
        assert page.status_code == 200 and "<th>attendee</th>" in page.text
        assert page.headers["referrer-policy"] == "no-referrer"
    finally:
        handle.stop()


def test_status_json_names_the_attendees(state: Path) -> None:
    create_workshop(load_inventory(LOCAL), 2, 8700, attendees=("Ada",))
    r = CliRunner().invoke(main, ["workshop", "status", "--json", "--lab", str(LOCAL)])
    assert r.exit_code == 0, r.output
    seats = json.loads(r.stdout)["seats"]
    assert [(s["seat"], s["attendee"]) for s in seats] == [(1, "Ada"), (2, None)]


def test_up_needs_a_number_of_seats_or_the_attendees(state: Path) -> None:
    r = CliRunner().invoke(main, ["workshop", "up", "--lab", str(LOCAL)])
    assert (r.exit_code, r.stderr) == (
        2,
        "error: [--seats]: how many seats? --seats N, or --attendees FILE\n",
    )


def test_a_seat_drills_output_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    """A seat drill's output names its pages' addresses, tokens included."""
    from runner.workshop.drills import _private_append

    old = os.umask(0o002)
    try:
        with _private_append(tmp_path / "seat-1.drill.out") as f:
            f.write(b"http://127.0.0.1:8701/responder/tok/\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "seat-1.drill.out").stat().st_mode) == 0o600
