"""The docker-compose lab on a real Docker Engine: image build (cached), the catalogue's scenarios
unchanged, host actions through Ansible, SIGKILL then cleanup, `lab down` removing exactly the
lab's objects, and bad input refused before anything is created.

Needs Docker. In CI (`GAMEDAY_REQUIRE_DOCKER=1`, set by .ci/run after it starts dockerd) a missing
Docker fails these tests; elsewhere it skips them with the reason."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.labs.compose.driver import ComposeLab
from runner.run import journal
from runner.run.parallel import instance
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, docker_or_skip, gameday, ok, variant

pytestmark = pytest.mark.e2e
INVENTORY = ROOT / "inventories" / "compose.yaml"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compose-state")


def gd(
    state: Path, *args: str, timeout: float = 900, **env: str
) -> subprocess.CompletedProcess[str]:
    """The CLI on this module's lab state (the compose lab outlives one test's state dir)."""
    return gameday(*args, timeout=timeout, env={"GAMEDAY_STATE_DIR": str(state), **env})


@pytest.fixture(scope="module")
def lab(state: Path) -> Iterator[ComposeLab]:
    docker_or_skip()
    p = gd(state, "lab", "build", "--lab", str(INVENTORY))
    assert p.returncode == 0, p.stderr
    p = gd(state, "lab", "up", "--lab", str(INVENTORY))
    assert p.returncode == 0, p.stderr
    os.environ["GAMEDAY_STATE_DIR"] = str(state)  # the driver below reads the same state
    driver = ComposeLab(load_inventory(INVENTORY))
    yield driver
    ok(gd(state, "lab", "down", "--lab", str(INVENTORY)))


def at_baseline(lab: ComposeLab) -> list[str]:
    return lab.leftovers() + [
        f"open journal entry {c.seq}" for c in journal.open_changes(lab.state_dir)
    ]


def test_build_is_cached(lab: ComposeLab, state: Path) -> None:
    p = gd(state, "lab", "build", "--lab", str(INVENTORY))
    assert p.returncode == 0, p.stderr
    assert "cached (inputs unchanged)" in p.stderr


def test_the_catalogue_passes_unchanged(lab: ComposeLab, state: Path, tmp_path: Path) -> None:
    p = gd(state, "run", "--lab", str(INVENTORY), "--reports", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir() and d.name != "latest"]
    result = json.loads((run / "result.json").read_text())
    assert {s["id"]: s["verdict"] for s in result["scenarios"]} == {
        sid: "passed"
        for sid in (
            "context-window-overflow",
            "kv-cache-shortage",
            "tp-mismatch",
            "service-name-collision",
            "head-only-restart",
            "stray-gpu-process",
            "dhcp-address-change",
            "silent-wrong-output",
            "missing-chat-template",
            "tp-head-divisibility",
            "lora-rank-over-max",
            "engine-core-hang",
            "nccl-watchdog-timeout",
            "cuda-graph-capture-oom",
            "pd-kv-handshake",
            "gpu-xid-error",
        )
    } | {
        "engine-core-death": "skipped",  # the lab's serving container restarts always
    }
    # host actions ran as Ansible playbooks, their events kept beside the report
    events = list((run / "ansible" / "artifacts").glob("*/job_events/*.json"))
    assert events, "no Ansible job events in the report directory"
    plays = {json.loads(e.read_text()).get("event_data", {}).get("playbook") for e in events}
    assert {"process.yaml", "change-address.yaml"} <= {Path(p).name for p in plays if p}
    # the service-link emulation says what it did
    sc = next(s for s in result["scenarios"] if s["id"] == "service-name-collision")
    text = json.dumps(sc)
    assert "compose lab emulation" in text and "VLLM_PORT" in text
    assert at_baseline(lab) == []


def test_parallel_two_as_separate_projects(lab: ComposeLab, state: Path, tmp_path: Path) -> None:
    """--parallel 2: the lab that is up, and a second Compose project beside it (its own
    containers, subnets and ports; host actions on its own containers), one merged report."""
    three = ["service-name-collision", "context-window-overflow", "dhcp-address-change"]
    argv = [f"scenarios/{s}.yaml" for s in three]
    p = gd(
        state, "run", *argv, "--lab", str(INVENTORY), "--parallel", "2", "--reports", str(tmp_path)
    )
    # two instances on a shared 2-core machine: a window the CPUs' contention stretched is
    # inconclusive (exit 3) with that evidence, never a wrong pass or fail
    assert p.returncode in (0, 3), p.stdout + p.stderr
    result = json.loads(next(tmp_path.glob("*/result.json")).read_text())
    assert result["lab"]["instances"] == 2
    verdicts = {s["id"]: s["verdict"] for s in result["scenarios"]}
    assert set(verdicts) == set(three) and set(verdicts.values()) <= {"passed", "inconclusive"}
    for sc in result["scenarios"]:
        for a in sc["assertions"]:
            if a["verdict"] == "inconclusive":
                assert "the machine was too loaded to judge" in a["observed"], a
    assert "@compose-p1]" in p.stderr and "@compose]" in p.stderr  # both instances ran some
    # the second instance, brought up by the run, is gone; the first is back at its baseline
    second = ComposeLab(instance(lab.inventory, 1))
    assert second.leftover_objects() == []
    assert not second.is_up()
    assert at_baseline(lab) == []


@pytest.mark.parametrize("scenario", ["stray-gpu-process", "dhcp-address-change"])
def test_sigkill_then_cleanup(lab: ComposeLab, state: Path, scenario: str, tmp_path: Path) -> None:
    rnd = random.Random(scenario)
    for delay in sorted(rnd.uniform(1.0, 9.0) for _ in range(2)):
        argv = ["run", f"scenarios/{scenario}.yaml", "--lab", str(INVENTORY)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", *argv, "--reports", str(tmp_path)],
            cwd=ROOT,
            env=os.environ | {"GAMEDAY_STATE_DIR": str(state)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        p = gd(state, "cleanup", "--lab", str(INVENTORY))
        assert p.returncode == 0, p.stderr
        assert at_baseline(ComposeLab(lab.inventory)) == [], f"after a kill at {delay:.2f} s"


def test_lab_down_removes_the_lab_and_nothing_else(lab: ComposeLab, state: Path) -> None:
    client = docker_or_skip()
    foreign = client.containers.create(
        "gameday-lab:latest", ["sleep", "60"], name="gameday-compose-not-the-lab"
    )
    try:
        p = gd(state, "lab", "down", "--lab", str(INVENTORY))
        assert p.returncode == 0, p.stderr
        assert ComposeLab(lab.inventory).leftover_objects() == []
        foreign.reload()  # still there
    finally:
        foreign.remove(force=True)


def _no_lab_objects(state: Path) -> list[str]:
    os.environ["GAMEDAY_STATE_DIR"] = str(state)
    return ComposeLab(load_inventory(INVENTORY)).leftover_objects()


def _variant(tmp_path: Path, **replace: str) -> Path:
    """The compose inventory with `replace` made; it names no file of the checkout (the
    compose file and playbooks are the package's), so the copy works wherever it is."""
    return variant(INVENTORY, tmp_path, replace)


def test_missing_image_is_one_message_and_nothing_created(state: Path, tmp_path: Path) -> None:
    docker_or_skip()
    inv = _variant(tmp_path, **{"image: gameday-lab:latest": "image: gameday-lab:not-built"})
    p = gd(state, "lab", "up", "--lab", str(inv))
    assert p.returncode == 3, p.stderr
    assert "gameday-lab:not-built is not built" in p.stderr and "gameday lab build" in p.stderr
    assert "Traceback" not in p.stderr
    assert _no_lab_objects(state) == []


def test_an_image_of_other_sources_is_refused(state: Path, tmp_path: Path) -> None:
    """An image `gameday lab build` made from other sources (its inputs label differs from the
    checkout's) would run other code than the runner asserts against: refused, naming the fix.
    The lab is another project, so that this module's lab being up does not matter."""
    import io

    client = docker_or_skip()
    ok(gd(state, "lab", "build", "--lab", str(INVENTORY)))  # cached when built
    tag = "gameday-lab:other-sources"
    dockerfile = b"FROM gameday-lab:latest\nLABEL gameday.inputs=0000000000000000\n"
    client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, rm=True)
    inv = _variant(
        tmp_path,
        **{
            "image: gameday-lab:latest": f"image: {tag}",
            "project: gameday-compose": "project: gameday-other-sources",
        },
    )
    try:
        p = gd(state, "lab", "up", "--lab", str(inv))
        assert p.returncode == 3, p.stderr
        assert f"the lab image {tag} was built from other sources" in p.stderr, p.stderr
        assert f"gameday lab build --lab {inv}" in p.stderr
        assert "Traceback" not in p.stderr
    finally:
        gd(state, "lab", "down", "--lab", str(inv))  # a lab that came up after all
        client.images.remove(tag, force=True)


def test_port_taken_is_one_message_and_nothing_created(state: Path) -> None:
    docker_or_skip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 19090))
        s.listen()
        p = gd(state, "lab", "up", "--lab", str(INVENTORY))
    assert p.returncode == 3, p.stderr
    assert "127.0.0.1:19090" in p.stderr and "taken" in p.stderr
    assert _no_lab_objects(state) == []


def test_project_name_clash_is_refused(state: Path) -> None:
    client = docker_or_skip()
    other = client.containers.create(
        "gameday-lab:latest",
        ["sleep", "60"],
        name="someone-elses",
        labels={"com.docker.compose.project": "gameday-compose"},
    )
    try:
        p = gd(state, "lab", "up", "--lab", str(INVENTORY))
        assert p.returncode == 3, p.stderr
        assert "compose project 'gameday-compose' already exists" in p.stderr
        assert _no_lab_objects(state) == []
    finally:
        other.remove(force=True)


def test_docker_not_running_is_one_message(state: Path) -> None:
    p = gd(
        state, "lab", "up", "--lab", str(INVENTORY), DOCKER_HOST="unix:///nonexistent/docker.sock"
    )
    assert p.returncode == 3, p.stderr
    assert "Docker is not running" in p.stderr and "Traceback" not in p.stderr
