"""The load generator cannot outlive the runner: it is a thread of the runner's process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
WHOLE = {"choices": [{"text": "hi", "finish_reason": "stop"}], "usage": {"completion_tokens": 3}}


class _Counting(BaseHTTPRequestHandler):
    count = 0

    def do_POST(self) -> None:
        type(self).count += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        data = json.dumps(WHOLE).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def counting_server() -> Iterator[tuple[str, type[_Counting]]]:
    handler = type("Counter", (_Counting,), {"count": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


CHILD = """
import sys, time
from runner.run.traffic import Traffic
from runner.spec.workload import Load
Traffic(sys.argv[1], Load(rate=50), 600).start()
time.sleep(600)
"""


def test_a_kill_9_of_the_runner_leaves_no_load(
    counting_server: tuple[str, type[_Counting]],
) -> None:
    """The generator is a thread of the runner's process: SIGKILL to the runner ends it, and
    nothing of its process group is left to send."""
    url, handler = counting_server
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, url], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while handler.count < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert handler.count >= 10, "the load never started"
        # a thread of the runner's own, no process: there is nothing for `gameday cleanup` to find
        assert _children(child.pid) == []
        assert len(list(Path(f"/proc/{child.pid}/task").iterdir())) >= 2
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        time.sleep(0.3)  # what was on the wire at the kill lands
        after = handler.count
        time.sleep(1.0)
        assert handler.count == after
        with pytest.raises(ProcessLookupError):
            os.killpg(child.pid, 0)  # no process of its group is left
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found
