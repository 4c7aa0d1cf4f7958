"""A workshop seat's drill page in a real headless Chromium (Debian's), behind its token: opened
with it, its Acknowledge button reaches the drill; without it (the bare address, another seat's
token, a request with none), nothing of the drill is read and nothing is done.

First on two seats' page servers over scripted drills (seconds), then on a real workshop of the
local lab: the page opened from the seat card, `gameday drill ack` carrying the token, and the
host page listing each seat with its attendee's name."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.drill.bus import DrillBus, Request
from runner.drill.model import DrillPhase, DrillStatus, EventKind
from runner.drill.server import ServerHandle, start_server
from runner.spec.inventory_load import load_inventory
from tests.support import browser
from tests.support.cli import ROOT, gameday, ok

pytestmark = pytest.mark.e2e
SCENARIO = "head-only-restart"
TITLE = "The head restarted alone"
REFUSED = "refused: this page needs its token (the address on the seat card, or the drill's)"


def need_browser() -> None:
    reason = browser.missing()
    if reason is not None:
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the browser test is required here (GAMEDAY_REQUIRE_DOCKER=1): {reason}")
        pytest.skip(reason)


def text(driver: Any, css: str) -> str:
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);", css
    )
    return " | ".join(" ".join(t.split()) for t in texts)


def post_from_page(driver: Any, path: str) -> list[Any]:
    """What a script in the page gets for a POST to `path` (relative to the page)."""
    return list(
        driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {method: 'POST', headers: {'X-Gameday': '1'}})"
            ".then(async r => done([r.status, await r.text()]))"
            ".catch(e => done([0, String(e)]));",
            path,
        )
    )


class Seat:
    """A seat's drill, scripted: handed over, and each request recorded and answered."""

    def __init__(self, token: str) -> None:
        self.bus = DrillBus(
            DrillStatus(
                scenario=SCENARIO,
                title=TITLE,
                lab="local-p1",
                seat=1,
                phase=DrillPhase.HANDED_OVER,
                started_at=datetime.now(UTC),
                fault_at=datetime.now(UTC),
                clock_s=1.0,
                hints_left=1,
            )
        )
        self.requests: list[Request] = []
        self.bus.on_request(self.handle)
        self.server = start_server(self.bus, token=token)

    def handle(self, req: Request, data: dict[str, Any]) -> str:
        self.requests.append(req)
        new = self.bus.status.model_copy(update={"acked_at_s": 9.0, "clock_s": 9.0})
        self.bus.publish(EventKind.ACK, "acknowledged (page)", status=new)
        return "acknowledged at +9.0 s"


@pytest.fixture
def seats() -> Iterator[tuple[Seat, Seat]]:
    one, two = Seat("seat1-" + "A1b2C3d4E5f6G7h8"), Seat("seat2-" + "Z9y8X7w6V5u4T3s2")
    yield one, two
    for s in (one, two):
        s.server.stop()
        s.bus.close()


def test_a_seat_page_opens_with_its_token_acts_and_is_refused_without_it(
    seats: tuple[Seat, Seat], tmp_path: Path
) -> None:
    need_browser()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    one, two = seats
    server: ServerHandle = one.server
    with browser.chromium() as driver:
        wait = WebDriverWait(driver, 15)
        # without the token: the page asks for it, and names nothing of the drill
        driver.get(server.root)
        wait.until(lambda b: text(b, "#refused") == "This drill's page needs its token")
        page = driver.page_source + driver.title
        assert SCENARIO not in page and TITLE not in page
        status, body = post_from_page(driver, "ack")
        assert (status, json.loads(body)) == (401, {"message": REFUSED})
        assert post_from_page(driver, "responder/x/ack")[0] == 401
        # another seat's token, on this seat's page: refused the same way
        driver.get(server.root + f"responder/{two.server.token}/")
        wait.until(lambda b: text(b, "#refused") == "This drill's page needs its token")
        assert post_from_page(driver, "ack")[0] == 401
        assert one.requests == [] and two.requests == []
        driver.save_screenshot(str(tmp_path / "refused.png"))

        # the token typed at the page's root, as a printed card gives it
        driver.get(server.root)
        driver.find_element(By.ID, "token").send_keys(server.token)
        driver.find_element(By.ID, "open").click()
        wait.until(lambda b: b.current_url == server.url)
        wait.until(lambda b: text(b, "#conn") == "live")
        assert text(driver, "#title") == "gameday drill"  # the responder's view
        driver.find_element(By.ID, "ack").click()
        wait.until(lambda b: text(b, "#answers li") == "acknowledge: acknowledged at +9.0 s")
        wait.until(lambda b: text(b, "#acked") == "+9.0 s")
        shot = tmp_path / "seat-page.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    assert one.requests == [Request.ACK] and two.requests == []
    # and outside a browser: a request with no token, or the other seat's, does nothing
    r = httpx.post(server.root + "ack", headers={"X-Gameday": "1"})
    assert (r.status_code, r.json()) == (401, {"message": REFUSED})
    assert httpx.get(server.root + f"responder/{two.server.token}/status").status_code == 401
    assert httpx.get(server.root + "events").status_code == 401
    assert one.requests == [Request.ACK]


def gd(state: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {"GAMEDAY_STATE_DIR": str(state), "GAMEDAY_REPORTS": str(state / "reports")}
    return gameday(*args, timeout=timeout, env=env)


def status_of(state: Path, inv: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        ok(gd(state, "workshop", "status", "--json", "--lab", str(inv))).stdout
    )
    return out


def test_a_workshop_seat_page_from_its_card_in_chromium(tmp_path: Path) -> None:
    """A real workshop on the local lab, its pages on another address than 127.0.0.1 (as a LAN
    address would be): the card's address opens seat 1's page; its button and `gameday drill
    ack` reach the drill; the bare address and seat 2's token do not; the host page lists both
    seats with their attendees and what seat 1's users felt."""
    need_browser()
    from selenium.webdriver.support.ui import WebDriverWait

    inv = ROOT / "inventories" / "local.yaml"
    names = tmp_path / "attendees.txt"
    names.write_text("Ada Lovelace\nGrace Hopper\n")
    up = gd(tmp_path, "workshop", "up", "--attendees", str(names), "--lab", str(inv),
            "--listen", "127.0.0.2", "--page-base", "8760", timeout=900)  # fmt: skip
    folder = tmp_path / "workshop" / load_inventory(inv).lab.name
    host: subprocess.Popen[str] | None = None
    try:
        ok(up)
        cards = [(folder / f"seat-{k}.md").read_text() for k in (1, 2)]
        urls = [re.search(r"page, once the drill runs: (\S+)", c) for c in cards]
        assert urls[0] is not None and urls[1] is not None
        url, other = urls[0].group(1), urls[1].group(1)
        assert url.startswith("http://127.0.0.2:8761/responder/") and "Ada Lovelace" in cards[0]
        token2 = other.rsplit("/", 2)[-2]
        assert token2 in cards[1] and token2 not in cards[0]
        assert (folder / "cards.html").stat().st_mode & 0o777 == 0o600
        ok(gd(tmp_path, "workshop", "start", SCENARIO, "--seats", "1", "--lab", str(inv)))
        deadline = time.monotonic() + 600
        while status_of(tmp_path, inv)["seats"][0]["state"] != "handed_over":
            assert time.monotonic() < deadline
            time.sleep(1)
        root = url.split("/responder/")[0] + "/"
        assert httpx.post(root + "ack", headers={"X-Gameday": "1"}).status_code == 401
        assert httpx.get(root + f"responder/{token2}/status").status_code == 401
        assert httpx.get(url + "status").json()["acked_at_s"] is None
        with browser.chromium() as driver:
            wait = WebDriverWait(driver, 30)
            driver.get(root + f"responder/{token2}/")
            wait.until(lambda b: text(b, "#refused") == "This drill's page needs its token")
            assert post_from_page(driver, "ack")[0] == 401
            driver.get(url)
            wait.until(lambda b: text(b, "#conn") == "live")
            driver.find_element("id", "ack").click()
            wait.until(lambda b: text(b, "#acked").startswith("+"))
            driver.save_screenshot(str(tmp_path / "seat-1.png"))
            # the host page: every seat, its attendee, its page to hand out
            host = subprocess.Popen(
                [sys.executable, "-m", "runner.cli", "workshop", "status", "--serve",
                 "--lab", str(inv)],
                cwd=ROOT, stderr=subprocess.PIPE, text=True,
                env=os.environ | {"GAMEDAY_STATE_DIR": str(tmp_path)},
            )  # fmt: skip
            assert host.stderr is not None
            line = host.stderr.readline()
            found = re.search(r"on (http://127\.0\.0\.1:8760/host/\S+/) ", line)
            assert found is not None, line
            assert httpx.get("http://127.0.0.1:8760/scoreboard.json").status_code == 401
            driver.get(found.group(1))
            wait.until(
                lambda b: text(b, "tr[data-seat] td.attendee") == "Ada Lovelace | Grace Hopper"
            )
            assert text(driver, "tr[data-seat='2'] a.seat-page") == other
            # seat 1's drill has the scenario's load: what its users felt since the fault
            wait.until(
                lambda b: (
                    re.fullmatch(r"\d+ of \d+ \| -", text(b, "tr[data-seat] td.users")) is not None
                )
            )
            assert driver.find_element("css selector", "th.users").is_displayed()
            driver.save_screenshot(str(tmp_path / "host.png"))
        st = status_of(tmp_path, inv)["seats"][0]
        assert st["acked_at_s"] is not None
        seat1 = folder / "seat-1.yaml"
        said = ok(gameday("drill", "hint", "--lab", str(seat1)))  # the token from server.json
        assert said.returncode == 0
    finally:
        if host is not None:
            host.terminate()
            host.wait(30)
        down = gd(tmp_path, "workshop", "down", "--lab", str(inv), "--grace", "120")
    ok(down)
