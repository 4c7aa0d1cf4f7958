"""The local lab itself: bring-up, bad input, restart policies, logs, undo after a kill."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LogSource, NodeStatus
from tests.support.cli import ROOT, gameday, inventory

pytestmark = pytest.mark.e2e


def no_supervisor_left(inv: Path) -> bool:
    lab = LocalLab(load_inventory(inv))
    return not lab.is_up() and not (lab.state_dir / "supervisor.pid").exists()


def test_port_in_use_is_one_clear_message(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "127.0.78.30")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.78.30", 8000))
        s.listen()
        p = gameday("run", "scenarios/tp-mismatch.yaml", "--lab", str(inv))
    assert p.returncode == 3
    assert "Traceback" not in p.stderr
    assert "127.0.78.30:8000" in p.stderr and "inventory.yaml" in p.stderr
    assert "hint:" in p.stderr
    assert no_supervisor_left(inv)


def test_engine_binary_missing(tmp_path: Path) -> None:
    inv = inventory(
        tmp_path,
        "127.0.78.31",
        **{"engine_command: [vllm-lab, serve]": "engine_command: [no-such-vllm]"},
    )
    p = gameday("lab", "up", "--lab", str(inv))
    assert p.returncode == 3 and "no-such-vllm" in p.stderr and "Traceback" not in p.stderr
    assert no_supervisor_left(inv)


def test_missing_inventory_and_bad_scenario() -> None:
    p = gameday("run", "scenarios/tp-mismatch.yaml", "--lab", "inventories/nope.yaml")
    assert p.returncode == 2 and "no such inventory file" in p.stderr
    p = gameday("validate", "README.md")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_status_of_a_lab_that_is_not_up(tmp_path: Path) -> None:
    inv = inventory(tmp_path, "127.0.78.32")
    p = gameday("lab", "status", "--lab", str(inv))
    assert p.returncode == 3 and "not up" in p.stderr and "gameday lab up" in p.stderr


def wait(lab: LocalLab, node: str, cond, timeout: float = 20):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    seq = 0
    while True:
        st = lab.states()[node]
        if cond(st):
            return st
        assert time.monotonic() < deadline, st
        evs = lab.wait_events(seq, 1.0)
        seq = evs[-1].seq if evs else seq


def test_restart_policies_and_exit_codes(tmp_path: Path) -> None:
    """on-failure restarts a crash but not an exit 0 (the DeepGEMM crash write-up's trap); `no`
    never restarts; `always` backs off like CrashLoopBackOff. Previous logs hold the failed
    incarnation."""
    text = (ROOT / "inventories" / "local.yaml").read_text()
    body = text.split("    serving:\n      hosts:\n")[0]
    host = """        {name}:
          gameday_role: serving
          gameday_address: {addr}
          gameday_restart: {policy}
          gameday_engine_args: [Qwen/Qwen2.5-14B-Instruct-AWQ, --max-model-len, "{len}",
                                --host, "{{address}}", --port, "{{port}}"]
"""
    hosts = "".join(
        host.format(name=n, addr=a, policy=pol, len=ln)
        for n, a, pol, ln in [
            ("crash-no", "127.0.78.40", "no", 131072),
            ("crash-onf", "127.0.78.41", "on-failure", 131072),
            ("ok-onf", "127.0.78.42", "on-failure", 4096),
        ]
    )
    inv_path = tmp_path / "inv.yaml"
    inv_path.write_text(
        body.replace("name: local", "name: policies") + "    nodes:\n      hosts:\n" + hosts
    )
    lab = LocalLab(load_inventory(inv_path))
    lab.up()
    try:
        st = wait(
            lab, "crash-no", lambda s: s.last_exit is not None and s.status is NodeStatus.EXITED
        )
        assert st.last_exit is not None and st.last_exit.code == 1 and st.restarts == 0
        assert st.last_exit.finished_at > st.last_exit.started_at
        prev = lab.logs("crash-no", LogSource.PREVIOUS)
        assert any("validation error for ModelConfig" in ln.text for ln in prev)
        assert all(ln.ts.tzinfo is not None for ln in prev)

        st = wait(lab, "crash-onf", lambda s: s.restarts >= 2)
        assert st.status in (NodeStatus.CRASH_LOOPING, NodeStatus.RUNNING)

        st = wait(lab, "ok-onf", lambda s: s.ready)
        with open(f"/proc/{st.pid}/task/{st.pid}/children") as f:
            core = int(f.read().split()[0])
        os.kill(core, signal.SIGKILL)  # the engine dies; the server exits 0
        st = wait(lab, "ok-onf", lambda s: s.status is NodeStatus.EXITED and s.last_exit)
        assert st.last_exit is not None and st.last_exit.code == 0
        time.sleep(0.5)  # give a (wrong) restart the chance to happen
        st = lab.states()["ok-onf"]
        assert st.status is NodeStatus.EXITED and st.restarts == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(lab.url("ok-onf") + "/health")
    finally:
        lab.down()


def run_until_injected(inv: Path, tmp_path: Path) -> subprocess.Popen[str]:
    """Bring the lab up, start `gameday run` on it and return once the fault is injected."""
    assert gameday("lab", "up", "--lab", str(inv)).returncode == 0
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "run",
            "scenarios/kv-cache-shortage.yaml",
            "--lab",
            str(inv),
            "--reports",
            str(tmp_path / "r"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell that started us in the background left SIGINT ignored; a terminal does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "expect: waiting for the failure" in line:
            break
    return proc


def test_kill_mid_run_then_cleanup(tmp_path: Path, lab_down_after: list[Path]) -> None:
    inv = inventory(tmp_path, "127.0.78.50")
    lab_down_after.append(inv)
    proc = run_until_injected(inv, tmp_path)
    proc.kill()  # SIGKILL: no cleanup can run
    proc.wait()
    lab = LocalLab(load_inventory(inv))
    assert lab.config("serving") != lab.baseline_config("serving")  # the fault is still there
    p = gameday("run", "scenarios/kv-cache-shortage.yaml", "--lab", str(inv))
    assert p.returncode == 3 and "gameday cleanup" in p.stderr
    p = gameday("cleanup", "--lab", str(inv))
    assert p.returncode == 0, p.stderr
    assert lab.config("serving") == lab.baseline_config("serving")
    assert gameday("cleanup", "--lab", str(inv)).returncode == 0  # idempotent
    wait(lab, "serving", lambda s: s.ready)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_runs_cleanup(tmp_path: Path, lab_down_after: list[Path], sig: int) -> None:
    inv = inventory(tmp_path, "127.0.78.51" if sig == signal.SIGINT else "127.0.78.52")
    lab_down_after.append(inv)
    proc = run_until_injected(inv, tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    # 128 + the signal, as a shell reports it: CI tells a cancelled job (143) from a failed one
    assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
    assert "Traceback" not in err
    # the report of what ran, marked interrupted, and its summary
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    (run_dir,) = [d for d in (tmp_path / "r").iterdir() if d.is_dir() and d.name != "latest"]
    result = json.loads((run_dir / "result.json").read_text())
    assert (result["interrupted"], result["verdict"]) == (name, "error")
    (scenario,) = result["scenarios"]
    assert scenario["file"] == "scenarios/kv-cache-shortage.yaml"  # the repository's name
    stopped = [a["observed"] for a in scenario["assertions"] if a["name"] == "interrupted"]
    assert stopped == [f"interrupted by {name} during expect; cleanup ran"]
    junit = (run_dir / "junit.xml").read_text()
    assert f'message="interrupted by {name} during expect; cleanup ran"' in junit
    assert f"verdict: error (interrupted by {name}: the reports hold what ran)" in out
    lab = LocalLab(load_inventory(inv))
    assert lab.config("serving") == lab.baseline_config("serving")
    from runner.run.journal import open_changes

    assert open_changes(lab.state_dir) == []
    p = gameday(
        "run", "scenarios/tp-mismatch.yaml", "--lab", str(inv), "--reports", str(tmp_path / "r2")
    )
    assert p.returncode == 0, p.stdout + p.stderr  # no leftovers: the next run just works


def test_reader_of_progress_gone(tmp_path: Path, lab_down_after: list[Path]) -> None:
    """`gameday run ... 2>&1 | head -1`: the run outlives its reader, cleans up, takes the lab it
    brought up down and writes its reports."""
    inv = inventory(tmp_path, "127.0.78.53")
    lab_down_after.append(inv)
    reports = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "run", "scenarios/service-name-collision.yaml",
         "--lab", str(inv), "--reports", str(reports)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    assert b"bringing up lab" in proc.stderr.readline()
    proc.stderr.close()  # the reader goes away; the run's next progress line meets a broken pipe
    assert proc.wait(timeout=120) == 0
    assert no_supervisor_left(inv)
    result = json.loads(next(reports.glob("*/result.json")).read_text())
    assert [s["verdict"] for s in result["scenarios"]] == ["passed"]
