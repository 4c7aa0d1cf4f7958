"""A two-node group whose head's engine core is SIGKILLed while a step is in flight: rank 0's
worker is a process of its own (vLLM's multiproc executor), so it completes the step with the
headless worker, which then blocks in its next queue read with only PyTorch's heartbeat line; the
NCCL watchdog never takes it down."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
SCALE = 1000
PG_TIMEOUT_S = 600 / SCALE  # PyTorch's process-group timeout, in this lab's seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, ok: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


def bytes_waiting_from(port: int) -> int:
    """Bytes queued unread on this machine's connections to 127.0.0.1:`port` (/proc/net/tcp's
    rx_queue): the step the head sent to a stopped worker."""
    total = 0
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = row.split()
        if int(cols[2].split(":")[1], 16) == port and cols[3] == "01":  # ESTABLISHED
            total += int(cols[4].split(":")[1], 16)
    return total


def engine_core_of(pid: int) -> int:
    """The API server's child (the lab's `process: engine_core`); rank 0's worker is its child."""
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def test_a_step_in_flight_is_completed_and_the_worker_only_hears_the_heartbeat(
    tmp_path: Path,
) -> None:
    master, http = free_port(), free_port()
    group = [QWEN, "--tensor-parallel-size", "2", "--nnodes", "2",
             "--master-addr", "127.0.0.1", "--master-port", str(master)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env |= {"GAMEDAY_TIME_SCALE": str(SCALE), "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "100"}
    serve = [sys.executable, "-m", "labengine", "serve"]
    out = tmp_path / "worker.log"
    with out.open("w") as log:
        worker = subprocess.Popen(
            [*serve, *group, "--node-rank", "1", "--headless"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    head = subprocess.Popen(
        [*serve, *group, "--node-rank", "0", "--host", "127.0.0.1", "--port", str(http)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{http}"
    try:

        def serving() -> bool:
            try:
                return httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for("the head serves", serving, 60)
        # the worker holds still: the head's step waits in its socket, the worker's part not given
        os.killpg(worker.pid, signal.SIGSTOP)
        body = {"model": QWEN, "prompt": "Say hi.", "max_tokens": 4}
        threading.Thread(
            target=lambda: httpx.post(f"{url}/v1/completions", json=body, timeout=30),
            daemon=True,
        ).start()
        wait_for("the step reaches the worker", lambda: bytes_waiting_from(master) > 0)
        os.kill(engine_core_of(head.pid), signal.SIGKILL)
        wait_for("the head's API server finds its engine dead", lambda: head.poll() is not None)
        os.killpg(worker.pid, signal.SIGCONT)

        wait_for(
            "the heartbeat line, or the worker's end",
            lambda: "should dump" in out.read_text() or worker.poll() is not None,
        )
        time.sleep(3 * PG_TIMEOUT_S)  # past the process group's timeout
        printed = out.read_text()
        assert worker.poll() is None, printed[-3000:]
        assert "Watchdog caught collective operation timeout" not in printed
        assert 'Failed to check the "should dump" flag on TCPStore' in printed
    finally:
        for proc in (worker, head):
            try:
                os.killpg(proc.pid, signal.SIGCONT)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
