"""The local lab's control socket and the state files that hold environment values are
owner-only; a node's very long log line kills nothing; a stale pid file never gets another
process signalled; state files are replaced whole, never torn."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(state: Path) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(state / "supervisor.sock")),
        base_url="http://supervisor",
        timeout=10.0,
    )


def answers(state: Path) -> bool:
    if not (state / "supervisor.sock").exists():
        return False
    try:
        with client(state) as c:
            c.get("/status").raise_for_status()
    except httpx.HTTPError:
        return False
    return True


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Any]:
    """Starts `python -m runner.labs.local.supervisor` on a state directory (created 0755, as
    an older gameday left it) whose lab.json names the given nodes; stops it afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    state = tmp_path / "lab"

    def start(nodes: list[dict[str, Any]]) -> Path:
        state.mkdir(mode=0o755)
        os.chmod(state, 0o755)
        spec = {"time_scale": 1.0, "nodes": nodes, "services": []}
        (state / "lab.json").write_text(json.dumps(spec))
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.labs.local.supervisor", str(state)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proc)
        # answering, as the driver's is_up() waits: the socket file exists from bind(), and a
        # connect() is refused until the server listens
        deadline = time.monotonic() + 20
        while not answers(state):
            assert proc.poll() is None, "the supervisor exited"
            assert time.monotonic() < deadline, "no answer on the supervisor's socket after 20 s"
            time.sleep(0.02)
        return state

    yield start
    for proc in procs:
        if proc.poll() is None:
            try:
                with client(state) as c:
                    c.post("/shutdown")
                proc.wait(timeout=15)
            except (httpx.HTTPError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


def test_control_socket_is_owner_only(supervisor: Any) -> None:
    state = supervisor([node("n", "import time; time.sleep(30)", {"HF_TOKEN": SECRET})])
    sock = state / "supervisor.sock"
    assert stat.S_ISSOCK(sock.stat().st_mode)
    assert mode(sock) == 0o600
    assert mode(state) == 0o700
    with client(state) as c:  # the owner still gets in
        assert c.get("/status").json()["nodes"]["n"]["name"] == "n"


def test_local_lab_state_is_owner_only(tmp_path: Path) -> None:
    """`lab up` makes the state directory 0700 before writing anything, and lab.json, which
    holds the nodes' environments, 0600."""
    state = tmp_path / "st"
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        f"""
all:
  vars:
    gameday_lab:
      name: sec
      kind: local
      state_dir: {state}
      engine_command: [{sys.executable}, -c, "import time; time.sleep(30)"]
  hosts:
    serving:
      gameday_role: serving
      gameday_address: 127.0.0.1
      gameday_port: {free_port()}
      gameday_restart: "no"
      gameday_engine_args: [m]
      gameday_engine_env: {{HF_TOKEN: {SECRET}}}
"""
    )
    lab = LocalLab(load_inventory(inv))
    try:
        lab.up()
        assert mode(state) == 0o700
        assert SECRET in (state / "lab.json").read_text()
        assert mode(state / "lab.json") == 0o600
        assert mode(state / "supervisor.sock") == 0o600
    finally:
        lab.down()


def test_a_1_mib_log_line_kills_nothing(supervisor: Any) -> None:
    """The node prints a 1 MiB line, then a short one, then exits with code 3: the exit is
    recorded and the log holds the short line and the long one cut, with a note."""
    code = "import sys; print('x' * (1 << 20)); print('after the long line'); sys.exit(3)"
    state = supervisor([node("n", code)])
    deadline = time.monotonic() + 20
    with client(state) as c:
        while True:
            st = c.get("/status").json()["nodes"]["n"]
            if st["last_exit"] is not None:
                break
            assert time.monotonic() < deadline, f"the node's exit was never recorded: {st}"
            time.sleep(0.05)
        assert st["status"] == "exited"
        assert st["last_exit"]["code"] == 3
        lines = c.get("/nodes/n/logs", params={"incarnation": 1}).text.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith(" more bytes]") and len(lines[0]) < 70_000
    assert lines[1].endswith(" after the long line")


def local_lab(state: Path, tmp_path: Path) -> LocalLab:
    inv = load_inventory(ROOT / "inventories" / "local.yaml")
    lab = inv.lab.model_copy(update={"state_dir": str(state)})
    return LocalLab(inv.model_copy(update={"lab": lab}))


def test_stale_pid_file_spares_an_unrelated_process(tmp_path: Path) -> None:
    state = tmp_path / "st"
    state.mkdir()
    other = subprocess.Popen(["sleep", "60"])
    try:
        (state / "supervisor.pid").write_text(str(other.pid))
        local_lab(state, tmp_path).down()
        with pytest.raises(subprocess.TimeoutExpired):  # still running: it was not signalled
            other.wait(timeout=2)
        assert not (state / "supervisor.pid").exists()
    finally:
        other.kill()
        other.wait()


def test_stale_pid_file_stops_the_labs_own_supervisor(tmp_path: Path) -> None:
    """A process started as this lab's supervisor (that no longer answers) is stopped."""
    state = tmp_path / "st"
    state.mkdir()
    hung = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            "-m",
            "runner.labs.local.supervisor",
            str(state.resolve()),
        ]
    )
    try:
        # as the supervisor writes its pid file itself: once it runs as one (exec'd; on a
        # loaded machine the fork's command line is this test's for a moment)
        cmdline = Path(f"/proc/{hung.pid}/cmdline")
        deadline = time.monotonic() + 10
        while b"runner.labs.local.supervisor" not in cmdline.read_bytes():
            assert time.monotonic() < deadline, "the stand-in supervisor never started"
            time.sleep(0.01)
        (state / "supervisor.pid").write_text(str(hung.pid))
        local_lab(state, tmp_path).down()
        assert hung.wait(timeout=10) == -15
    finally:
        hung.kill()
        hung.wait()


ROOT = Path(__file__).resolve().parents[3]


SECRET = "hf_s3cr3t"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def node(name: str, code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A node whose engine is a tiny Python program (headless: no health probe)."""
    return {
        "name": name,
        "address": "127.0.0.1",
        "port": 1,
        "restart": "no",
        "http_health": False,
        "command": [sys.executable, "-c", code],
        "args": [],
        "env": env or {},
        "base_env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    }
