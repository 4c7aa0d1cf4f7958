"""`gameday drill head-only-restart --no-page` as a child process, and a scripted person: on the
local lab with `gameday lab restart`, on the compose lab with `docker restart` run directly. The
person first restarts the head alone (the shortcut: the drill flags it with the step's why),
then the whole group (service back: the drill records recovery, cleans up and exits 0); the
after-action report holds both actions with their times, and the scenario's load's failures
while people worked (the live status showed them as they came)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.drill.bus import read_status
from runner.drill.model import DrillPhase, DrillStatus
from runner.labs import open_lab
from runner.labs.compose.driver import ComposeLab
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, docker_or_skip, gameday, inventory, ok

pytestmark = pytest.mark.e2e
TP = ("node1", "node2", "node3", "node4")
SHORTCUT_WHY = "the workers' process group is already broken; they never rejoin a new head"
FIRST_HINT = (
    "The head exited with code 0, so an on-failure policy never restarted it. "
    "What do the workers say?"
)


def start_drill(inv: Path, reports: Path, log: Path, page: bool = False) -> subprocess.Popen[str]:
    """The drill, its output to a file (a pipe nobody reads would fill and block it)."""
    args = ["drill", "head-only-restart", "--lab", str(inv)]
    args += [] if page else ["--no-page"]
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
        # the users' failures show while people work, before anyone has acted
        felt = status_when(folder, proc, lambda s: bool(s.users and s.users.fault_failed), 60)
        assert felt.users is not None and felt.users.sent > felt.users.fault_sent  # baseline's
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
    [run_dir] = [d for d in reports.iterdir() if not d.is_symlink()]  # and `latest`
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
    # the scenario's load ran from the baseline to the end: failures while people worked
    phases = {f["phase"]: f for f in s["impact"]["phases"]}
    assert phases["baseline"]["sent"] >= 40 and phases["baseline"]["failed"] == 0
    assert phases["fault"]["failed"] > 0
    assert phases["verify"]["sent"] > 0 and phases["verify"]["failed"] == 0


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


def test_the_page_of_a_drill_in_chromium(tmp_path: Path, lab_down_after: list[Path]) -> None:
    """A real drill's page in Debian's headless Chromium: a person's restart reaches it without a
    reload, flagged as the shortcut (its why kept for the after-action report); its Hint and
    Acknowledge buttons reach the drill and end up in the after-action report."""
    from tests.support import browser

    reason = browser.missing()
    if reason is not None:
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the browser test is required here (GAMEDAY_REQUIRE_DOCKER=1): {reason}")
        pytest.skip(reason)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    named = f"name: drillpage\n      state_dir: {tmp_path / 'lab-state'}"
    inv = inventory(tmp_path, "127.0.78.72", **{"name: local": named})
    lab_down_after.append(inv)
    folder = open_lab(load_inventory(inv)).state_dir / "drill"
    reports = tmp_path / "reports"
    LOGS[folder] = tmp_path / "drill.log"
    proc = start_drill(inv, reports, LOGS[folder], page=True)
    shot = tmp_path / "drill-page.png"
    try:
        st = status_when(folder, proc, lambda s: s.phase is DrillPhase.HANDED_OVER, 400)
        assert st.page_url is not None and st.page_url.startswith("http://127.0.0.1:")
        with browser.chromium() as driver:
            wait = WebDriverWait(driver, 60)
            driver.get(st.page_url)
            wait.until(lambda b: page_text(b, "#conn") == "live")
            wait.until(lambda b: page_text(b, "#nodes [data-node=node1] .state") == "exited")
            driver.execute_script("window.gamedayMarker = 'no reload';")
            ok(gameday("lab", "restart", "node1", "--lab", str(inv)))
            wait.until(lambda b: "shortcut" in page_text(b, "#actions li").lower())
            # the responders' page says a shortcut was tried, and keeps its why until the end
            assert SHORTCUT_WHY not in page_text(driver, "#actions li")
            driver.find_element(By.ID, "hint").click()
            wait.until(lambda b: page_text(b, "#hints li").startswith(FIRST_HINT))
            driver.find_element(By.ID, "ack").click()
            wait.until(lambda b: page_text(b, "#acked").startswith("+"))
            assert driver.execute_script("return window.gamedayMarker;") == "no reload"
            assert driver.save_screenshot(str(shot))
            print(f"screenshot: {shot}")
        st = status_when(folder, proc, lambda s: s.acked_at_s is not None and bool(s.hints), 30)
        assert [h.text for h in st.hints] == [FIRST_HINT]
        ok(gameday("lab", "restart", *TP, "--lab", str(inv)))
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
    assert proc.returncode == 0, tail(folder)
    assert shot.stat().st_size > 10_000
    [run_dir] = [d for d in reports.iterdir() if not d.is_symlink()]  # and `latest`
    d = json.loads((run_dir / "result.json").read_text())["scenarios"][0]["drill"]
    assert [h["text"] for h in d["hints"]] == [FIRST_HINT]
    assert d["time_to_acknowledge_s"] is not None
    assert [a["shortcut"] for a in d["actions"]] == [True, False]


def page_text(driver: Any, css: str) -> str:
    """The rendered text of every element `css` selects, white space collapsed, ' | ' between."""
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);", css
    )
    return " | ".join(" ".join(t.split()) for t in texts)
