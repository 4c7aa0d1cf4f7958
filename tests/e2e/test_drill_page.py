"""The drill's live page in a real headless Chromium: a node's state change arrives without a
reload, the Hint and Acknowledge buttons reach the drill and show its answer, and the load's
users' error rate moves as the drill publishes it, on both views."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.drill.bus import DrillBus, Request
from runner.drill.model import (
    DrillPhase,
    DrillStatus,
    EventKind,
    NodeView,
    ProbeView,
    UsersView,
)
from runner.drill.server import ServerHandle, start_server
from runner.drill.users import BIN_S, BINS, WINDOW_S
from runner.results.drill_record import HintView
from runner.spec.kinds import NodeStatus
from tests.support import browser

pytestmark = pytest.mark.e2e
HINT = "Compare the head's generation with the workers'."


def node(status: NodeStatus, restarts: int, generation: int) -> NodeView:
    ready = status is NodeStatus.RUNNING
    return NodeView(
        name="node1", status=status, ready=ready, restarts=restarts, generation=generation
    )


class ScriptedDrill:
    """What a drill does with its bus, scripted: a node exits and comes back; ack and hint
    requests are recorded and answered."""

    def __init__(self) -> None:
        self.bus = DrillBus(
            DrillStatus(
                scenario="head-only-restart",
                title="The head restarted alone",
                lab="local",
                phase=DrillPhase.HANDED_OVER,
                started_at=datetime.now(UTC),
                fault_at=datetime.now(UTC),
                clock_s=0.0,
                nodes=(node(NodeStatus.RUNNING, 0, 1),),
                probes=(ProbeView(name="inference", verdict="failed", observed="HTTP 503"),),
                hints_left=1,
            )
        )
        self.requests: list[Request] = []
        self.page_saw_exit = threading.Event()
        self.bus.on_request(self.handle)

    def handle(self, req: Request, data: dict[str, Any]) -> str:
        self.requests.append(req)
        st = self.bus.status
        if req is Request.HINT:
            hint = HintView(index=1, text=HINT, at_s=12.0, requested=True)
            new = st.model_copy(update={"hints": (hint,), "hints_left": 0, "clock_s": 12.0})
            self.bus.publish(EventKind.HINT, f"hint 1: {HINT}", status=new)
            return "hint 1 released"
        new = st.model_copy(update={"acked_at_s": 15.0, "clock_s": 15.0})
        self.bus.publish(EventKind.ACK, "acknowledged (page)", status=new)
        return "acknowledged at +15.0 s"

    def run(self) -> None:
        st = self.bus.status
        self.bus.publish(
            EventKind.NODE,
            "node1: exited (code 1)",
            status=st.model_copy(
                update={"nodes": (node(NodeStatus.EXITED, 0, 1),), "clock_s": 3.0}
            ),
        )
        self.page_saw_exit.wait(20)
        self.bus.publish(
            EventKind.NODE,
            "node1: running (generation 2)",
            status=st.model_copy(
                update={"nodes": (node(NodeStatus.RUNNING, 1, 2),), "clock_s": 6.0}
            ),
        )


@pytest.fixture
def drill() -> Iterator[tuple[ScriptedDrill, ServerHandle]]:
    d = ScriptedDrill()
    server = start_server(d.bus)
    yield d, server
    d.page_saw_exit.set()
    server.stop()
    d.bus.close()


def text(driver: Any, css: str) -> str:
    """The rendered text of every element `css` selects, its white space collapsed, joined by
    ' | '; read in one script, as the page redraws its parts whole."""
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);", css
    )
    return " | ".join(" ".join(t.split()) for t in texts)


def test_the_page_follows_the_drill_and_its_buttons_reach_it(
    drill: tuple[ScriptedDrill, ServerHandle], tmp_path: Path
) -> None:
    reason = browser.missing()
    if reason is not None:
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the browser test is required here (GAMEDAY_REQUIRE_DOCKER=1): {reason}")
        pytest.skip(reason)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d, server = drill
    with browser.chromium() as driver:
        wait = WebDriverWait(driver, 15)
        driver.get(server.url)
        wait.until(lambda b: text(b, "#conn") == "live")
        wait.until(lambda b: text(b, "#nodes [data-node=node1] .state") == "running")
        assert text(driver, "#probes td") == "inference | failed | HTTP 503"
        driver.execute_script("window.gamedayMarker = 'no reload';")
        loaded_at = driver.execute_script("return window.gamedayPageLoadedAt;")

        threading.Thread(target=d.run, daemon=True).start()
        wait.until(lambda b: text(b, "#nodes [data-node=node1] .state") == "exited")
        d.page_saw_exit.set()
        wait.until(lambda b: text(b, "#nodes [data-node=node1] .state") == "running")
        assert text(driver, "#nodes [data-node=node1] .meta") == "ready · restarts 1 · gen 2"

        driver.find_element(By.ID, "hint").click()
        wait.until(lambda b: text(b, "#hints li").startswith(HINT))
        driver.find_element(By.ID, "ack").click()
        wait.until(lambda b: text(b, "#acked") == "+15.0 s")
        wait.until(lambda b: "…" not in text(b, "#answers li"))

        assert d.requests == [Request.HINT, Request.ACK]
        assert text(driver, "#answers li") == (
            "hint: hint 1 released | acknowledge: acknowledged at +15.0 s"
        )
        assert text(driver, "#hints li") == f"{HINT} (+12.0 s, asked for)"
        assert text(driver, "#timeline li") == " | ".join(
            [
                "+3.0 s node1: exited (code 1)",
                "+6.0 s node1: running (generation 2)",
                f"+12.0 s hint 1: {HINT}",
                "+15.0 s acknowledged (page)",
            ]
        )
        assert driver.execute_script("return window.gamedayMarker;") == "no reload"
        assert driver.execute_script("return window.gamedayPageLoadedAt;") == loaded_at
        shot = tmp_path / "drill-page.png"
        assert driver.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000


def _users(now_sent: int, now_failed: int, fault: tuple[int, int]) -> UsersView:
    bins = ((0, 0),) * (BINS - 2) + ((10, 0), (now_sent, now_failed))
    return UsersView(
        sent=40 + fault[0],
        failed=fault[1],
        fault_sent=fault[0],
        fault_failed=fault[1],
        window_s=WINDOW_S,
        now_sent=now_sent,
        now_failed=now_failed,
        bin_s=BIN_S,
        bins=bins,
    )


def test_both_views_show_the_users_error_rate_as_it_moves(
    drill: tuple[ScriptedDrill, ServerHandle],
) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.integration.runner.test_report_page import need_browser

    need_browser()
    d, server = drill

    def users(view: UsersView) -> None:
        st = d.bus.status.model_copy(update={"users": view})
        d.bus.publish(EventKind.USERS, view.line(), status=st)

    with browser.chromium() as driver:
        wait = WebDriverWait(driver, 15)
        for url in (server.url, server.facilitator_url):
            driver.get(url)
            wait.until(lambda b: text(b, "#conn") == "live")
            if url == server.url:
                assert not driver.find_element("id", "users").is_displayed()  # no load yet
            else:  # the snapshot carries the figures as they were last (nothing is published
                # until this holds; the page may draw the snapshot after it reads as live)
                wait.until(lambda b: text(b, "#users-now") == "0% failing (last 10 s)")
            users(_users(20, 15, (30, 15)))
            wait.until(lambda b: text(b, "#users-now") == "75% failing (last 10 s)")
            assert text(driver, "#users-fault") == "15 of 30 failed (50.0%)"
            assert text(driver, "#users-all") == "15 of 70 failed (21.4%)"
            # the newest bar: 15 failed over 5 answered, both drawn; the one before all ok
            bars = driver.execute_script(
                "return Array.from(document.querySelectorAll('#users-strip rect'),"
                " r => r.getAttribute('class'));"
            )
            assert bars == ["ok", "bad", "ok"]
            users(_users(20, 0, (50, 15)))
            wait.until(lambda b: text(b, "#users-now") == "0% failing (last 10 s)")
            assert text(driver, "#users-fault") == "15 of 50 failed (30.0%)"
            # one line, redrawn in place: not one per look
            lines = [t for t in text(driver, "#timeline li").split(" | ") if "users:" in t]
            assert lines == [f"+0.0 s {_users(20, 0, (50, 15)).line()}"]
