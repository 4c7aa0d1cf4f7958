"""Workshops on real labs: `workshop up` brings the seats up as isolated instances, the
scoreboard shows them idle, `workshop down` leaves nothing (no process, no container, no
namespace, no folder). Local lab (3 seats), compose (2 seats), Kubernetes on the stand-in API
server (2 seats, a namespace each)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.labs import open_lab
from runner.results.rundirs import run_dirs
from runner.run.parallel import instance
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, gameday, kube_serving_only, ok

pytestmark = pytest.mark.e2e


def gd(state: Path, *args: str, timeout: float = 600) -> Any:
    env = {"GAMEDAY_STATE_DIR": str(state), "GAMEDAY_REPORTS": str(state / "reports")}
    return gameday(*args, timeout=timeout, env=env)


def processes_naming(text: str) -> list[str]:
    """Command lines of this machine's processes that mention `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd:
            found.append(cmd)
    return found


def up_status_down(state: Path, inv: Path, n: int) -> dict[str, Any]:
    """`workshop up --seats n`, `status --json` (returned), `workshop down`."""
    up = gd(state, "workshop", "up", "--seats", str(n), "--lab", str(inv), timeout=900)
    try:
        ok(up)
        lab = load_inventory(inv).lab.name
        for k in range(1, n + 1):
            assert f"# Seat {k}: lab {lab}-p{k} " in up.stdout
            assert (state / "workshop" / lab / f"seat-{k}.md").exists()
        board = json.loads(ok(gd(state, "workshop", "status", "--json", "--lab", str(inv))).stdout)
    finally:
        down = gd(state, "workshop", "down", "--lab", str(inv), timeout=600)
    ok(down)
    assert "nothing of it is left" in down.stderr
    assert not (state / "workshop" / load_inventory(inv).lab.name).exists()
    result: dict[str, Any] = board
    return result


def test_three_local_seats_up_idle_and_down_leaves_nothing(tmp_path: Path) -> None:
    inv = ROOT / "inventories" / "local.yaml"
    board = up_status_down(tmp_path, inv, 3)
    assert [(s["seat"], s["lab"], s["state"]) for s in board["seats"]] == [
        (1, "local-p1", "idle"),
        (2, "local-p2", "idle"),
        (3, "local-p3", "idle"),
    ]
    assert processes_naming(str(tmp_path)) == []  # no supervisor, node, exporter or Prometheus
    os.environ["GAMEDAY_STATE_DIR"] = str(tmp_path)
    try:
        base = load_inventory(inv)
        assert [open_lab(instance(base, k)).leftover_objects() for k in (1, 2, 3)] == [[], [], []]
    finally:
        del os.environ["GAMEDAY_STATE_DIR"]


def test_two_compose_seats_up_idle_and_down_leaves_nothing(tmp_path: Path, lab_image: str) -> None:
    from tests.support.cli import docker_or_skip

    docker = docker_or_skip()
    inv = ROOT / "inventories" / "compose.yaml"
    board = up_status_down(tmp_path, inv, 2)
    assert [(s["seat"], s["state"]) for s in board["seats"]] == [(1, "idle"), (2, "idle")]
    project = load_inventory(inv).lab.compose.project  # type: ignore[union-attr]
    for k in (1, 2):
        label = f"com.docker.compose.project={project}-p{k}"
        assert docker.containers.list(all=True, filters={"label": label}) == []
        assert docker.networks.list(filters={"label": label}) == []


@pytest.fixture(scope="module")
def kubeapi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The real control plane and our kubelet, at the inventory's kubeconfig."""
    from tests.support.kubecluster import real_cluster

    state = tmp_path_factory.mktemp("kubereal")
    with real_cluster(state, ROOT / "build" / "kubeapi" / "kubeconfig") as cluster:
        yield cluster


@pytest.mark.kube_real
def test_two_kubernetes_seats_are_two_labelled_namespaces(tmp_path: Path, kubeapi: Any) -> None:
    from kubernetes import client, config

    core = client.CoreV1Api(
        config.new_client_from_config(config_file=str(ROOT / "build" / "kubeapi" / "kubeconfig"))
    )
    # one serving pod a seat: two seats of the 4-node group would want 10 GPUs of the 5
    inv = kube_serving_only(tmp_path)
    ok(gd(tmp_path, "workshop", "up", "--seats", "2", "--lab", str(inv), timeout=900))
    try:
        labels = {
            n.metadata.name: (n.metadata.labels or {}).get("gameday.io/lab")
            for n in core.list_namespace().items
        }
        assert labels["gameday-lab-s1"] == "kube-testserver-p1"
        assert labels["gameday-lab-s2"] == "kube-testserver-p2"
        assert "gameday-lab" not in labels  # the lab as written is not a seat
    finally:
        ok(gd(tmp_path, "workshop", "down", "--lab", str(inv)))
    deadline = time.monotonic() + 10
    names: list[str] = []
    while time.monotonic() < deadline:
        names = [n.metadata.name for n in core.list_namespace().items]
        if not {"gameday-lab-s1", "gameday-lab-s2"} & set(names):
            break
        time.sleep(0.1)
    assert {"gameday-lab-s1", "gameday-lab-s2"} & set(names) == set()


def test_a_local_seat_that_cannot_come_up_takes_the_workshop_down(tmp_path: Path) -> None:
    import socket

    inv = ROOT / "inventories" / "local.yaml"
    with socket.socket() as taken:  # seat 2's serving node's address and port, in use
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past earlier TIME_WAITs
        taken.bind(("127.2.77.10", 8000))
        taken.listen()
        r = gd(tmp_path, "workshop", "up", "--seats", "2", "--lab", str(inv))
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("error: workshop not started: seat 2: "), r.stderr
    assert "seat 1" not in r.stderr.splitlines()[0]
    assert not (tmp_path / "workshop" / "local").exists()
    assert processes_naming(str(tmp_path)) == []  # seat 1, which came up, is down again


HEAD_ALONE = "Restart the head alone (what `--restart always` would do)"


def board_when(state: Path, inv: Path, cond: Any, timeout: float) -> dict[str, Any]:
    """The scoreboard (`workshop status --json`) once `cond` holds for every seat."""
    deadline = time.monotonic() + timeout
    while True:
        board: dict[str, Any] = json.loads(
            ok(gd(state, "workshop", "status", "--json", "--lab", str(inv))).stdout
        )
        if all(cond(s) for s in board["seats"]):
            return board
        assert time.monotonic() < deadline, board
        time.sleep(1)


def drilled(state: Path, inv: Path, n: int) -> dict[str, Any]:
    """`workshop up --seats n`, a head-only-restart drill on every seat, and on each a scripted
    person who first restarts the head alone (the shortcut), then the group; the scoreboard
    at the end, after `workshop down`."""
    ok(gd(state, "workshop", "up", "--seats", str(n), "--lab", str(inv), timeout=900))
    try:
        ok(gd(state, "workshop", "start", "head-only-restart", "--lab", str(inv)))
        board_when(state, inv, lambda s: s["state"] == "handed_over", 600)
        lab = load_inventory(inv).lab.name
        seats = [state / "workshop" / lab / f"seat-{k}.yaml" for k in range(1, n + 1)]
        for seat in seats:
            ok(gameday("lab", "restart", "node1", "--lab", str(seat)))
        board_when(state, inv, lambda s: s["shortcuts"] == [HEAD_ALONE], 120)
        for seat in seats:
            ok(gameday("lab", "restart", "tp_group", "--lab", str(seat)))
        board = board_when(state, inv, lambda s: s["state"] == "done", 600)
    finally:
        down = gd(state, "workshop", "down", "--lab", str(inv), timeout=600)
    ok(down)
    assert "nothing of it is left" in down.stderr
    board["down"] = down.stderr
    return board


def test_three_local_seats_drilled_by_scripted_people(tmp_path: Path) -> None:
    board = drilled(tmp_path, ROOT / "inventories" / "local.yaml", 3)
    rows = [(s["seat"], s["lab"], s["scenario"], s["shortcuts"]) for s in board["seats"]]
    assert rows == [(k, f"local-p{k}", "head-only-restart", [HEAD_ALONE]) for k in (1, 2, 3)]
    assert all(s["recovered_at_s"] is not None for s in board["seats"])
    assert processes_naming(str(tmp_path)) == []
    # the summary `down` wrote, and the seats' reports beside it, out of the team's history
    (folder,) = (tmp_path / "reports" / "workshops").iterdir()
    assert f"workshop summary: {folder}/ (summary.md, summary.html)" in board["down"]
    md = (folder / "summary.md").read_text()
    for k in (1, 2, 3):
        assert f"| {k} | local-p{k} | head-only-restart | recovered | " in md
    assert md.count(f"{HEAD_ALONE.replace('`', chr(92) + '`')}: ") == 3
    assert (folder / "summary.html").read_text().count('<tr class="seat"') == 3
    results = [d / "result.json" for d in run_dirs(folder)]  # not `latest`, a pointer
    assert [json.loads(p.read_text())["mode"] for p in results] == ["seat"] * 3
    assert list((tmp_path / "reports").glob("*/result.json")) == []


def test_two_compose_seats_drilled_by_scripted_people(tmp_path: Path, lab_image: str) -> None:
    board = drilled(tmp_path, ROOT / "inventories" / "compose.yaml", 2)
    rows = [(s["seat"], s["scenario"], s["shortcuts"]) for s in board["seats"]]
    assert rows == [(k, "head-only-restart", [HEAD_ALONE]) for k in (1, 2)]
    assert all(s["recovered_at_s"] is not None for s in board["seats"])
