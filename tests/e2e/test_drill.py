"""`gameday drill head-only-restart --no-page` as a child process, and a scripted person: on the
local lab with `gameday lab restart`, on the compose lab with `docker restart` run directly. The
person first restarts the head alone (the shortcut: the drill flags it with the step's why),
then the whole group (service back: the drill records recovery, cleans up and exits 0); the
after-action report holds both actions with their times."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.drill.bus import read_status
from runner.drill.model import DrillPhase, DrillStatus
from runner.inventory import load_inventory
from runner.labs import open_lab
from runner.labs.compose.driver import ComposeLab
from tests.support.cli import ROOT, docker_or_skip, gameday, inventory, ok

pytestmark = pytest.mark.e2e
TP = ("node1", "node2", "node3", "node4")
SHORTCUT_WHY = "the workers' process group is already broken; they never rejoin a new head"


def start_drill(inv: Path, reports: Path, log: Path) -> subprocess.Popen[str]:
    """The drill, its output to a file (a pipe nobody reads would fill and block it)."""
    args = ["drill", "head-only-restart", "--no-page", "--lab", str(inv)]
    args += ["--reports", str(reports), "--timeout", "300"]
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "runner.cli", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def status_when(
    folder: Path, proc: subprocess.Popen[str], cond: Callable[[DrillStatus], bool], timeout: float
) -> DrillStatus:
    deadline = time.monotonic() + timeout
    while True:
        st = read_status(folder)
        if st is not None and cond(st):
            return st
        if proc.poll() is not None:
            raise AssertionError(f"the drill exited {proc.returncode}: {tail(folder)}")
        assert time.monotonic() < deadline, f"status: {st}"
        time.sleep(0.2)


LOGS: dict[Path, Path] = {}


def tail(folder: Path) -> str:
    return LOGS[folder].read_text()[-4000:]


def drill_with(inv: Path, tmp_path: Path, restart: Callable[[list[str]], None]) -> dict[str, Any]:
    lab = open_lab(load_inventory(inv))
    folder = lab.state_dir / "drill"
    reports = tmp_path / "reports"
    LOGS[folder] = tmp_path / "drill.log"
    proc = start_drill(inv, reports, LOGS[folder])
    try:
        status_when(folder, proc, lambda s: s.phase is DrillPhase.HANDED_OVER, 400)
        restart(["node1"])
        st = status_when(folder, proc, lambda s: bool(s.actions), 60)
        first = st.actions[0]
        assert (first.kind.value, first.nodes, first.shortcut, first.why) == (
            "restart",
            ("node1",),
            True,
            SHORTCUT_WHY,
        )
        assert st.phase is DrillPhase.HANDED_OVER  # a head restarted alone brings nothing back
        restart(list(TP))
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
    assert proc.returncode == 0, tail(folder)
    [run_dir] = list(reports.iterdir())
    data: dict[str, Any] = json.loads((run_dir / "result.json").read_text())
    return data


def check(data: dict[str, Any]) -> None:
    assert data["mode"] == "drill"
    [s] = data["scenarios"]
    d = s["drill"]
    assert d["outcome"] == "recovered"
    kinds = [(a["kind"], tuple(a["nodes"]), a["step"], a["shortcut"]) for a in d["actions"]]
    assert kinds == [
        ("restart", ("node1",), "Restart the head alone (what `--restart always` would do)", True),
        ("group_restart", TP, "Restart all four nodes together", False),
    ]
    first, second = d["actions"]
    assert 0 < first["at_s"] < second["at_s"] < d["time_to_recover_s"]
    assert [a["why"] for a in d["shortcuts"]] == [SHORTCUT_WHY]
    assert s["verdict"] == "passed"


def test_a_drill_on_the_local_lab_with_gameday_lab_restart(
    tmp_path: Path, lab_down_after: list[Path]
) -> None:
    named = f"name: drill\n      state_dir: {tmp_path / 'lab-state'}"
    inv = inventory(tmp_path, "127.0.78.71", **{"name: local": named})
    lab_down_after.append(inv)

    def restart(nodes: list[str]) -> None:
        ok(gameday("lab", "restart", *nodes, "--lab", str(inv)))

    check(drill_with(inv, tmp_path, restart))
    assert not open_lab(load_inventory(inv)).is_up()  # the drill brought it up, and down


def test_a_drill_on_the_compose_lab_with_docker_restart_run_directly(
    tmp_path: Path, lab_image: str, lab_down_after: list[Path]
) -> None:
    docker_or_skip()
    inv = ROOT / "inventories" / "compose.yaml"
    lab_down_after.append(inv)
    lab = ComposeLab(load_inventory(inv))

    def restart(nodes: list[str]) -> None:
        # the containers as the lab names them (an exited head included); the restart is
        # Docker's own CLI: `docker restart a b c d` restarts them one after the other
        ids = [lab.engine(n).id for n in nodes]
        subprocess.run(["docker", "restart", *ids], check=True, timeout=120)

    check(drill_with(inv, tmp_path, restart))
