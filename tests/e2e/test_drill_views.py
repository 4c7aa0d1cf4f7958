"""The drill page's two views in a real headless Chromium: the responder's page names no scenario
and gives no shortcut's `why` until the drill ends (then it shows the after-action whole); the
facilitator's shows everything; on both, a crash loop is one line with a count and its node is
not drawn green. Screenshots of each are saved in the test's tmp dir."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runner.drill.bus import DrillBus
from runner.drill.model import DrillPhase, DrillStatus, EventKind, NodeView, ProbeView
from runner.drill.server import ServerHandle, start_server
from runner.results.drill_record import ActionKind, Actor, ObservedAction
from runner.spec.kinds import NodeStatus, Outcome
from tests.support import browser

pytestmark = pytest.mark.e2e
SCENARIO = "kv-cache-shortage"
TITLE = "The KV cache cannot hold one sequence"
WHY = "the engine needs more KV cache than the flag allows; a restart changes nothing"
STEP = "Restart the pod and hope"
GREEN = "rgb(21, 128, 61)"  # the page's --ok


def serving(status: NodeStatus, restarts: int, looping: bool) -> NodeView:
    return NodeView(
        name="serving",
        status=status,
        ready=False,
        restarts=restarts,
        generation=1,
        crash_looping=looping,
    )


def drill_bus() -> DrillBus:
    """A drill as the session publishes it: the injection's lines before the fault, a crash
    loop going round seven times, a person's restart that is the scenario's shortcut."""
    st = DrillStatus(
        scenario=SCENARIO,
        title=TITLE,
        lab="local",
        phase=DrillPhase.INJECT,
        started_at=datetime.now(UTC),
        nodes=(serving(NodeStatus.RUNNING, 0, False),),
        hints_left=1,
    )
    bus = DrillBus(st)
    bus.publish(EventKind.TIMELINE, "inject: set_args serving --max-model-len 32768", status=st)
    st = st.model_copy(
        update={"phase": DrillPhase.HANDED_OVER, "fault_at": datetime.now(UTC), "clock_s": 1.0}
    )
    bus.publish(EventKind.PHASE, "handed over 1.0 s after the fault", status=st)
    for k in range(1, 8):
        st = st.model_copy(
            update={"clock_s": 1.0 + k, "nodes": (serving(NodeStatus.RUNNING, k, True),)}
        )
        bus.publish(
            EventKind.NODE,
            "serving exited, serving started",
            {
                "node": "serving",
                "actor": Actor.RESTART_POLICY.value,
                "crash_loop": {"crashes": 1, "restarts": 1},
            },
            status=st,
        )
        probe = ProbeView(name="inference", verdict="failed", observed=f"refused ({k})")
        st = st.model_copy(update={"probes": (probe,)})
        bus.publish(EventKind.PROBE, "probes: 0/1 pass", status=st)
    shortcut = ObservedAction(
        at_s=12.0,
        kind=ActionKind.RESTART,
        nodes=("serving",),
        detail="restarted",
        step=STEP,
        outcome=Outcome.DOES_NOT_RESTORE,
        shortcut=True,
        why=WHY,
        actor=Actor.LAB_VERB,
    )
    st = st.model_copy(update={"clock_s": 12.0, "actions": (shortcut,)})
    bus.publish(
        EventKind.ACTION,
        f"shortcut: {STEP}: {WHY}",
        shortcut.model_dump(mode="json"),
        status=st,
    )
    return bus


@pytest.fixture
def served() -> Iterator[tuple[DrillBus, ServerHandle]]:
    bus = drill_bus()
    server = start_server(bus)
    yield bus, server
    server.stop()
    bus.close()


def text(driver: Any, css: str) -> str:
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);", css
    )
    return " | ".join(" ".join(t.split()) for t in texts)


def shown(driver: Any, shot: Path) -> str:
    """The page's whole text, its title and source, after a screenshot saved to `shot`."""
    assert driver.save_screenshot(str(shot)), shot
    assert shot.stat().st_size > 10_000, shot
    body = driver.execute_script("return document.body.innerText;")
    return f"{driver.title}\n{body}\n{driver.page_source}"


def test_the_responder_s_page_keeps_the_answer_the_facilitator_s_shows_all(
    served: tuple[DrillBus, ServerHandle], tmp_path: Path
) -> None:
    reason = browser.missing()
    if reason is not None:
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the browser test is required here (GAMEDAY_REQUIRE_DOCKER=1): {reason}")
        pytest.skip(reason)
    from selenium.webdriver.support.ui import WebDriverWait

    bus, server = served
    loop_line = "serving crashed and restarted ×7 (restart policy)"
    with browser.chromium() as driver:
        wait = WebDriverWait(driver, 15)
        driver.get(server.url)
        wait.until(lambda b: text(b, "#conn") == "live")
        wait.until(lambda b: "shortcut" in text(b, "#actions li"))
        shot = tmp_path / "responder.png"
        page = shown(driver, shot)
        for secret in (SCENARIO, TITLE, WHY, STEP, "32768"):
            assert secret not in page, f"{secret!r} on the responder's page: {shot}"
        assert text(driver, "#title") == "gameday drill", shot
        assert text(driver, "#view") == "responder's view", shot
        assert text(driver, "#actions li") == (
            "+12.0 s restart serving: restarted (gameday lab verb) "
            "shortcut: why, in the after-action report"
        ), shot
        timeline = text(driver, "#timeline li")
        assert timeline.count("crashed and restarted") == 1, (timeline, shot)
        assert f"+2.0 s {loop_line} · last +8.0 s" in timeline, (timeline, shot)
        border = driver.execute_script(
            "return getComputedStyle(document.querySelector('[data-node=serving]'))"
            ".borderLeftColor;"
        )
        assert border != GREEN, shot
        assert text(driver, "#nodes [data-node=serving] .state") == "running · crash-looping"

        driver.get(server.facilitator_url)
        wait.until(lambda b: text(b, "#conn") == "live")
        wait.until(lambda b: WHY in text(b, "#actions li"))
        shot = tmp_path / "facilitator.png"
        page = shown(driver, shot)
        for told in (SCENARIO, TITLE, WHY, STEP, "32768", loop_line):
            assert told in page, f"{told!r} not on the facilitator's page: {shot}"
        assert text(driver, "#view") == "facilitator's view", shot

        driver.get(server.url)
        wait.until(lambda b: text(b, "#conn") == "live")
        ended = bus.status.model_copy(update={"phase": DrillPhase.GAVE_UP, "clock_s": 20.0})
        bus.publish(EventKind.PHASE, "gave up: cleaning up to the baseline", status=ended)
        wait.until(lambda b: WHY in text(b, "#actions li"))
        shot = tmp_path / "responder-after-action.png"
        page = shown(driver, shot)
        for told in (SCENARIO, TITLE, WHY, STEP, "32768"):
            assert told in page, f"{told!r} not on the responder's page after the end: {shot}"
    print(f"screenshots: {tmp_path}")
