"""The compose lab's reading of Docker's event feed when the feed lags behind the containers, as
on a busy machine: Docker's state records are already a later start's or exit's by the time an
event is handled, and the lab stops a container whose latest restart it has not seen yet."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runner.labs.base import EventType
from runner.labs.compose.driver import ComposeLab
from runner.run.context import first_exit
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def stamp(s: float) -> str:
    return at(s).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


class FakeContainer:
    """What `docker inspect` says *now*: the latest start and exit, whichever event is asked."""

    def __init__(self, cid: str, started: float) -> None:
        self.id = cid
        self.started, self.finished, self.running, self.restarts = started, None, True, 0

    @property
    def attrs(self) -> dict[str, Any]:
        return {
            "State": {
                "StartedAt": stamp(self.started),
                "FinishedAt": stamp(self.finished) if self.finished else "0001-01-01T00:00:00Z",
                "Status": "running" if self.running else "exited",
                "Running": self.running,
                "Pid": 4242,
            },
            "RestartCount": self.restarts,
        }

    def logs(self, **_: Any) -> Any:
        raise RuntimeError("no log stream in this test")


class FakeDocker:
    def __init__(self) -> None:
        self.by_id: dict[str, FakeContainer] = {}

    @property
    def containers(self) -> FakeDocker:
        return self

    def get(self, cid: str) -> FakeContainer:
        return self.by_id[cid]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ComposeLab:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    lab = ComposeLab(load_inventory(ROOT / "inventories" / "compose.yaml"))
    lab._client = FakeDocker()
    return lab


def test_a_restart_seen_late_is_its_own_incarnation(lab: ComposeLab) -> None:
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    b = docker.by_id["b"] = FakeContainer("b", started=1.0)
    # the container started at 1.0, exited at 1.5 and was restarted at 1.6 by its policy before
    # the lab handled the first start event
    b.finished, b.started, b.restarts = 1.5, 1.6, 1
    lab.watch.on_start(node, "b", at(1.01))
    lab.watch.on_die(node, "b", {"exitCode": "1"}, at(1.5))
    lab.watch.on_start(node, "b", at(1.61))
    incs = lab.watch.incs["serving"]
    assert [i.number for i in incs] == [1, 2]
    assert incs[0].started_at == at(1.01) and incs[0].finished_at == at(1.5)
    assert incs[1].started_at == at(1.6)


def test_an_exit_of_a_container_the_lab_is_replacing_is_the_labs_own(lab: ComposeLab) -> None:
    """A re-apply stops the old container; a restart of it that the feed had not shown yet when
    the stop began is stopped too, and is not the failure the scenario waits for."""
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    b = docker.by_id["b"] = FakeContainer("b", started=1.0)
    lab.watch.on_start(node, "b", at(1.0))
    b.running, b.finished = False, 1.5
    lab.watch.on_die(node, "b", {"exitCode": "1"}, at(1.5))
    seq = len(lab.feed.events)
    # the re-apply begins (as _reapply marks it) before the restart at 1.6 reaches the lab
    lab.watch.stopping["b"] = math.inf
    b.running, b.started, b.restarts = True, 1.6, 1
    lab.watch.on_start(node, "b", at(1.6))
    b.running, b.finished = False, 1.8
    lab.watch.on_die(node, "b", {"exitCode": "137"}, at(1.8))
    c = docker.by_id["c"] = FakeContainer("c", started=2.0)
    lab.watch.on_start(node, "c", at(2.0))
    c.running, c.finished = False, 2.5
    lab.watch.on_die(node, "c", {"exitCode": "1"}, at(2.5))
    failure = first_exit(lab.feed.events[seq:])
    assert failure is not None
    assert (failure.incarnation, failure.code) == (3, 1)
    stopped = [e for e in lab.feed.events[seq:] if e.type is EventType.EXITED and e.stopped]
    assert [e.exit.incarnation for e in stopped if e.exit] == [2]


def test_a_restart_by_the_lab_ends_the_stop_window(lab: ComposeLab) -> None:
    """Exits after the lab started a stopped container again are the node's own."""
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    b = docker.by_id["b"] = FakeContainer("b", started=1.0)
    lab.watch.on_start(node, "b", at(1.0))
    lab.watch.stopping["b"] = at(1.2).timestamp()  # the lab's stop returned at 1.2
    b.running, b.finished = False, 1.1
    lab.watch.on_die(node, "b", {"exitCode": "0"}, at(1.1))
    b.running, b.started = True, 1.3
    lab.watch.on_start(node, "b", at(1.3))
    b.running, b.finished = False, 1.9
    lab.watch.on_die(node, "b", {"exitCode": "1"}, at(1.9))
    exits = [e for e in lab.feed.events if e.type is EventType.EXITED]
    assert [e.stopped for e in exits] == [True, False]


def test_a_replayed_exit_from_before_the_known_start_is_ignored(lab: ComposeLab) -> None:
    """The feed opens a second early: an exit from before the start the lab took at sync does not
    end the running incarnation."""
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    docker.by_id["b"] = FakeContainer("b", started=2.0)
    lab.watch.on_start(node, "b", at(2.0))
    lab.watch.on_die(node, "b", {"exitCode": "1"}, at(1.5))
    assert lab.watch.incs["serving"][-1].finished_at is None
    assert not [e for e in lab.feed.events if e.type is EventType.EXITED]


def test_a_docker_restart_from_outside_gameday_is_a_stop_not_a_failure(lab: ComposeLab) -> None:
    """`docker restart` (or `docker stop`) sends SIGTERM first: Docker's kill event says so. The
    exit that follows is a stop; a later exit of the same container is the node's own again."""
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    b = docker.by_id["b"] = FakeContainer("b", started=1.0)
    lab.watch.on_start(node, "b", at(1.0))
    lab.watch.on_kill("b", {"signal": "15", "name": "b"})
    b.running, b.finished = False, 1.2
    lab.watch.on_die(node, "b", {"exitCode": "0"}, at(1.2))
    b.running, b.started = True, 1.3
    lab.watch.on_start(node, "b", at(1.3))
    b.running, b.finished = False, 1.9
    lab.watch.on_die(node, "b", {"exitCode": "1"}, at(1.9))
    exits = [e for e in lab.feed.events if e.type is EventType.EXITED]
    assert [(e.stopped, e.exit.code if e.exit else None) for e in exits] == [(True, 0), (False, 1)]


def test_a_signal_the_lab_sends_as_a_fault_is_a_failure(lab: ComposeLab) -> None:
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    b = docker.by_id["b"] = FakeContainer("b", started=1.0)
    lab.watch.on_start(node, "b", at(1.0))
    lab.watch.signalled.add("b")  # as the driver's `signal` marks it before killing
    lab.watch.on_kill("b", {"signal": "15"})
    b.running, b.finished = False, 1.2
    lab.watch.on_die(node, "b", {"exitCode": "143"}, at(1.2))
    lab.watch.on_kill("b", {"signal": "9"})  # a SIGKILL from outside is no stop either
    exits = [e for e in lab.feed.events if e.type is EventType.EXITED]
    assert [e.stopped for e in exits] == [False]
    assert lab.watch.signalled == set()


def test_the_lab_knows_when_its_feed_is_behind_docker(lab: ComposeLab) -> None:
    """Docker's record of a start or an exit the feed has not delivered yet: the runner waits for
    it rather than reading "no exit"."""
    docker: FakeDocker = lab._client
    node = lab.inventory.node("serving")
    b = docker.by_id["b"] = FakeContainer("b", started=1.0)
    assert lab.watch.behind("serving", b)  # started, not shown yet
    lab.watch.on_start(node, "b", at(1.01))
    assert not lab.watch.behind("serving", b)
    b.running, b.finished = False, 1.5
    assert lab.watch.behind("serving", b)  # exited, not shown yet
    lab.watch.on_die(node, "b", {"exitCode": "1"}, at(1.5))
    assert not lab.watch.behind("serving", b)
    b.running, b.started, b.restarts = True, 1.6, 1
    assert lab.watch.behind("serving", b)  # restarted by its policy, not shown yet
    lab.watch.on_start(node, "b", at(1.61))
    assert not lab.watch.behind("serving", b)
    c = docker.by_id["c"] = FakeContainer("c", started=2.0)
    assert lab.watch.behind("serving", c)  # a new container (a re-apply), not shown yet
    assert not lab.watch.behind("serving", None)
