"""The watchdog's loop on the fake lab: what it looks at, how it acts (a whole-group restart
through the driver, the alert), and what it records (metrics, one JSON-able log record per
decision)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest

from runner.labs.fake import FakeLab
from runner.run.probing import ProbeEnv
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.probes import InferenceProbe
from runner.watchdog.loop import LabClock, Observer, Watchdog, probe_target
from runner.watchdog.machine import Decision, Policy, WatchState, start
from runner.watchdog.metrics import WatchMetrics
from tests.support.fakelab import inventory

CHAT = {"choices": [{"message": {"content": "OK"}, "finish_reason": "length"}]}


@dataclass(frozen=True)
class Clock(LabClock):
    """A lab clock that moves 30 real-world seconds per look."""

    looks: list[None] = field(default_factory=list)

    def now_s(self) -> float:
        self.looks.append(None)
        return 30.0 * len(self.looks)


@dataclass
class Api:
    """The group's API and an alert receiver: `answer` is what completions get."""

    answer: int = 200
    alerts: list[object] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v2/alerts":
            self.alerts.append(json.loads(request.content))
            return httpx.Response(200)
        if self.answer != 200:
            return httpx.Response(self.answer, text="engine dead")
        assert request.url.path == "/v1/chat/completions"
        return httpx.Response(200, json=CHAT)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[FakeLab]:
    lab = FakeLab(inventory(tmp_path), state_dir=tmp_path / "state")
    lab.up()
    yield lab


def watch(lab: FakeLab, api: Api, policy: Policy) -> tuple[Watchdog, list[Decision]]:
    nodes = ["node1", "node2"]
    dog = Watchdog(
        lab,
        "inv.yaml",
        "tp_group",
        nodes,
        policy,
        WatchMetrics("tp_group"),
        alert_url="http://alerts.test/api/v2/alerts",
    )
    dog.memory = start(0)
    seen: list[Decision] = []
    dog.on_step = lambda s: seen.append(s.decision)
    return dog, seen


def looks(dog: Watchdog, lab: FakeLab, api: Api, n: int) -> None:
    clock = Clock(scale=1000.0)
    http = httpx.Client(transport=httpx.MockTransport(api))
    env = ProbeEnv(http=http, lab=lab, scale=1000.0, target="node1")
    probe = InferenceProbe(kind="inference", prompt="x", max_tokens=8, expect_finish_reason=None)
    observer = Observer(lab, dog.nodes)
    for _ in range(n):
        dog.tick(clock, observer, env, probe, http)


def test_the_probe_goes_to_the_head_of_a_group(lab: FakeLab) -> None:
    assert probe_target(lab, ["node2", "node1"]) == "node1"
    assert probe_target(lab, ["node2"]) == "node2"


def test_serving_is_proven_by_inference(lab: FakeLab) -> None:
    api = Api()
    dog, seen = watch(lab, api, Policy())
    looks(dog, lab, api, 2)
    assert seen == [Decision.SERVING, Decision.OK]
    text = generate_latest(dog.metrics.registry).decode()
    assert 'gameday_watchdog_state{gameday_watchdog_state="serving",group="tp_group"} 1.0' in text
    assert 'gameday_watchdog_last_probe_ok{group="tp_group"} 1.0' in text
    assert 'gameday_watchdog_decisions_total{decision="serving",group="tp_group"} 1.0' in text
    assert 'gameday_watchdog_decisions_total{decision="ok",group="tp_group"} 1.0' in text


def test_failed_inference_restarts_the_whole_group_then_gives_up_and_alerts(
    lab: FakeLab, caplog: pytest.LogCaptureFixture
) -> None:
    api = Api()
    dog, seen = watch(lab, api, Policy(suspect_after=2, restart_budget=1))
    looks(dog, lab, api, 1)
    api.answer = 500
    with caplog.at_level(logging.INFO, logger="gameday.watchdog"):
        looks(dog, lab, api, 8)
    assert seen == [
        Decision.SERVING,
        Decision.SUSPECT,
        Decision.RESTART,
        Decision.BOOT,
        Decision.SUSPECT,
        Decision.GIVE_UP,
        Decision.HOLD,
        Decision.HOLD,
        Decision.HOLD,
    ]
    assert lab.restarted == [["node1", "node2"]]
    assert dog.memory is not None and dog.memory.state is WatchState.GAVE_UP
    (alert,) = api.alerts
    assert alert[0]["labels"]["alertname"] == "GamedayWatchdogGaveUp"
    assert alert[0]["annotations"]["logs"] == "gameday lab logs node1 --previous --lab inv.yaml"
    give_up = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.watch["decision"] for r in give_up] == ["give_up"]  # type: ignore[attr-defined]
    text = generate_latest(dog.metrics.registry).decode()
    assert 'gameday_watchdog_restarts_total{group="tp_group"} 1.0' in text
    assert 'gameday_watchdog_last_probe_ok{group="tp_group"} 0.0' in text
    assert 'gameday_watchdog_state{gameday_watchdog_state="gave_up",group="tp_group"} 1.0' in text


def test_the_observer_sees_progress(lab: FakeLab) -> None:
    observer = Observer(lab, ["node1", "node2"])
    assert observer.look() == (True, True, (), ())  # the first look: everything is new
    assert observer.look() == (False, True, (), ())
    lab.signal(
        "node2", EngineProcess.ENGINE_CORE, SignalName.KILL
    )  # the fake lab restarts it at once
    # a new incarnation, ready at once on the fake lab: progress, not a start to wait for
    assert observer.look() == (True, True, (), ())
