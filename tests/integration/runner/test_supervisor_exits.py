"""The local lab's supervisor counts each of its own processes' exits (Prometheus, Alertmanager,
an exporter: those it keeps running), so that the lab's `dead_part` names one that died even once
the supervisor has started it again; a process the lab stops is not counted."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from runner.labs.local.supervisor import Aux


def _aux(tmp_path: Path, script: str) -> Aux:
    return Aux(
        name="prometheus",
        command=["sh", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        log=tmp_path / "prometheus.log",
        restart=True,
    )


def test_the_supervisor_counts_a_lab_process_exiting_on_its_own(tmp_path: Path) -> None:
    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        dying = _aux(tmp_path, "echo 'err: lock DB directory'; exit 1")
        steady = Aux("alertmanager", ["sleep", "30"], {}, tmp_path / "am.log", restart=True)
        dying.start()
        steady.start()
        for _ in range(200):
            if dying.exits >= 2:
                break
            await asyncio.sleep(0.02)
        await steady.stop()  # stopped by the lab: not a death
        await dying.stop()
        return dying.snapshot(), steady.snapshot()

    dying, steady = asyncio.run(go())
    assert dying["exits"] >= 2 and dying["last_exit_code"] == 1 and dying["restart"]
    assert (steady["exits"], steady["last_exit_code"]) == (0, None)
    assert dying["log"] == str(tmp_path / "prometheus.log")


def test_the_supervisor_counts_a_lab_program_that_cannot_start(tmp_path: Path) -> None:
    aux = Aux("prometheus", [str(tmp_path / "nothing")], {}, tmp_path / "p.log", restart=True)
    asyncio.run(aux.run())
    assert (aux.exits, aux.last_exit_code) == (1, 127)
    assert "exec " in (tmp_path / "p.log").read_text()


def _marked(mark: str) -> list[int]:
    """The processes whose environment carries `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_supervisor_stopped_by_a_signal_stops_what_it_started(tmp_path: Path, sig: int) -> None:
    """A signal ends the supervisor only after it has stopped its nodes and lab services: none of
    them is left running without it."""
    mark = f"GAMEDAY_TEST_MARK={uuid.uuid4().hex}"
    env = {"PATH": "/usr/bin:/bin", mark.split("=")[0]: mark.split("=")[1]}
    state = tmp_path / "lab"
    state.mkdir(mode=0o700)
    (state / "lab.json").write_text(
        json.dumps(
            {
                "time_scale": 100,
                "nodes": [
                    {
                        "name": "serving",
                        "address": "127.0.0.1",
                        "port": 1,
                        "restart": "always",
                        "http_health": False,
                        "command": ["sh", "-c", "echo up; exec sleep 300"],
                        "args": [],
                        "env": {},
                        "base_env": env,
                        "aux": [{"name": "exporter", "command": ["sleep", "301"], "env": env}],
                    }
                ],
                "services": [
                    {"name": "prometheus", "command": ["sleep", "302"], "env": env, "restart": True}
                ],
            }
        )
    )
    sup = subprocess.Popen(
        [sys.executable, "-m", "runner.labs.local.supervisor", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while len(_marked(mark)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_marked(mark)) == 3, "the node, its exporter and the service did not start"
        sup.send_signal(sig)
        sup.wait(timeout=30)
        assert _marked(mark) == []
    finally:
        if sup.poll() is None:
            sup.kill()
        for pid in _marked(mark):
            os.kill(pid, signal.SIGKILL)


def test_a_supervisor_that_exited_is_gone_though_nobody_has_reaped_it_yet() -> None:
    """`lab down` waits for the supervisor to be gone. One that `lab up` started belongs to init
    once that command ends, and an init may take seconds to reap it: its zombie is not alive."""
    from runner.labs.local.driver import _alive

    # a parent that forks a child which exits at once, and does not reap it for a while
    code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "print(pid, flush=True)\n"
        "time.sleep(5)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        assert not _alive(child)
        assert _alive(parent.pid)  # a live process is alive
    finally:
        parent.kill()
        parent.wait()


def test_a_stop_waits_for_the_whole_process_group() -> None:
    """An engine's core (any process of the node's group) may outlive the engine by a moment
    after SIGTERM: the stop returns once none of them runs."""
    from runner.labs.local.supervisor import group_running, terminate

    # the leader ends at once on SIGTERM; a member of its group takes 0.3 s to end
    script = '(trap "sleep 0.3; exit 0" TERM; while :; do sleep 0.05; done) & exec sleep 30'

    async def scenario() -> bool:
        proc = await asyncio.create_subprocess_exec("sh", "-c", script, start_new_session=True)
        await asyncio.sleep(0.3)  # the member has set its trap
        await terminate(proc)
        return group_running(proc.pid)

    assert not asyncio.run(scenario())
