"""Trust on shared machines, where a real process is needed: lab traffic with a proxy in the
environment, a `command` step's processes after its runner is killed, the alert receiver on a
socket."""

from __future__ import annotations

import ast
import contextlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from runner.labs.common.alertmanager_config import receiver_token, write_alertmanager
from runner.run import journal, orphans
from runner.run.receiver import WebhookReceiver
from runner.run.stepexec import run_command
from runner.run.undo import cleanup_lab
from runner.spec.config import builtin_lab
from runner.spec.inventory_load import load_inventory
from runner.spec.usersteps import CommandStep
from tests.support.fakelab import fake_run, scenario_doc

# ---- lab traffic never goes through the environment's proxy --------------------------------

_PROXIED = r"""
import json, sys
from runner.labs.common import prometheus_config
from runner.run.context import http_client
from runner.run.stepexec import run_http
from runner.spec.usersteps import HttpStep

base = sys.argv[1]
step = HttpStep(kind="http", path="/admin", headers={"Authorization": "Bearer lab-secret"})
out = [run_http(step, base, http_client()).observed]
out.append(prometheus_config._HTTP.get(base + "/api/v1/targets").status_code)
print(json.dumps(out))
"""


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(f"{self.path} {self.headers.get('Authorization')}")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


def _serve(seen: list[str]) -> http.server.ThreadingHTTPServer:
    handler = type("H", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_lab_traffic_never_reaches_a_proxy_from_the_environment() -> None:
    """HTTP_PROXY (and its kin) set to a listening fake proxy: a probe, an `http` step with its
    Authorization header and a look at Prometheus all go straight to the lab's address, and
    nothing reaches the proxy."""
    via_proxy: list[str] = []
    direct: list[str] = []
    proxy, lab = _serve(via_proxy), _serve(direct)
    try:
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            env[name] = env[name.lower()] = proxy_url
        base = f"http://127.0.0.1:{lab.server_address[1]}"
        done = subprocess.run(
            [sys.executable, "-c", _PROXIED, base],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        proxy.shutdown()
        lab.shutdown()
    assert json.loads(done.stdout) == ["HTTP 200", 200]
    assert via_proxy == []
    assert direct == ["/admin Bearer lab-secret", "/api/v1/targets None"]


def _lab_http_calls(path: Path) -> list[tuple[int, bool]]:
    """(line, passes trust_env=False) of every httpx client built or request made in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "httpx"
            and node.func.attr
            in {"Client", "AsyncClient", "get", "post", "request", "stream", "put", "delete"}
        ):
            off = any(
                k.arg == "trust_env"
                and isinstance(k.value, ast.Constant)
                and k.value.value is False
                for k in node.keywords
            )
            out.append((node.lineno, off))
    return out


def test_every_lab_http_client_ignores_the_environments_proxy() -> None:
    """Every client the runner (its run, labs, watchdog, drills, load), the lab engine and
    vllmfacts build: each talks to a lab's own addresses."""
    root = Path(__file__).resolve().parents[3]
    found = [
        (str(f.relative_to(root)), line, off)
        for package in ("runner", "labengine", "vllmfacts")
        for f in sorted((root / package).rglob("*.py"))
        for line, off in _lab_http_calls(f)
    ]
    assert len(found) >= 7
    assert [(f, line) for f, line, off in found if not off] == []


# ---- a `command` step's processes end with the step, and with its runner -------------------

_RUNNER = r"""
import signal, sys
from pathlib import Path
from runner.cli.options import _terminate
from tests.support.fakelab import fake_run, scenario_doc

signal.signal(signal.SIGTERM, _terminate)  # as the CLI does: SIGTERM stops a run like Ctrl-C
doc = scenario_doc()
doc["inject"].append({"kind": "command", "argv": ["sleep", sys.argv[2]], "timeout_s": 600})
fake_run(Path(sys.argv[1]), doc).run()
"""


def _sleeps(secs: str) -> list[int]:
    """The pids of `sleep SECS` running now (zombies left out)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_bytes().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        argv = cmdline.split(b"\0")[:-1]  # argv[0]: the path the step resolved
        if argv[1:] == [secs.encode()] and argv[0].endswith(b"sleep") and state != b"Z":
            out.append(int(proc.name))
    return out


def _until(what: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_runner(tmp_path: Path, secs: str) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[3]
    env = os.environ | {"PYTHONPATH": str(root)}
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(tmp_path), secs], env=env)
    assert _until(lambda: bool(_sleeps(secs)), 60), "the step never started"
    return runner


def _kill_sleeps(secs: str) -> None:
    for pid in _sleeps(secs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("sig", "secs"), [(signal.SIGTERM, "9871"), (signal.SIGINT, "9872")])
def test_a_step_dies_with_its_runner_on_sigterm_and_ctrl_c(
    tmp_path: Path, sig: signal.Signals, secs: str
) -> None:
    runner = _start_runner(tmp_path, secs)
    try:
        runner.send_signal(sig)
        runner.wait(60)
        assert _until(lambda: not _sleeps(secs), 10), f"sleep {secs} outlived its runner"
    finally:
        runner.kill()
        _kill_sleeps(secs)


def test_gameday_cleanup_stops_a_step_its_killed_runner_left_running(tmp_path: Path) -> None:
    """kill -9 of the runner: the step's `sleep` runs on, in the session the step gave it; the
    journal holds the mark its environment carries, and cleanup stops it."""
    secs = "9873"
    runner = _start_runner(tmp_path, secs)
    try:
        runner.kill()
        runner.wait(10)
        time.sleep(0.5)
        pids = _sleeps(secs)
        assert len(pids) == 1, "the kill -9 left no step behind to clean up"
        lab = fake_run(tmp_path, scenario_doc()).lab  # the same state folder: its journal
        outcome = cleanup_lab(lab)
        assert _until(lambda: not _sleeps(secs), 10)
        assert outcome.steps[0] == (
            "cleanup stopped what command sleep 9873 (timeout 600 s) (scenario fake-startup) "
            f"left running: pid {pids[0]}"
        )
        assert journal.open_steps(lab.state_dir) == []
        assert orphans.marked([m for m in _marks(lab.state_dir)]) == {}
    finally:
        _kill_sleeps(secs)


def _marks(state_dir: Path) -> list[str]:
    return [
        json.loads(line)["mark"]
        for f in (state_dir / "journal").glob("*.jsonl")
        for line in f.read_text().splitlines()
        if json.loads(line).get("op") == "step"
    ]


def test_what_a_step_leaves_in_its_group_ends_with_it(tmp_path: Path) -> None:
    """The step's first process exits, leaving a child in its group: the child goes too."""
    step = CommandStep(kind="command", argv=["sh", "-c", "sleep 9874 & echo started"])
    t0 = time.monotonic()
    run = run_command(step, tmp_path, {"PATH": "/usr/bin:/bin"})
    try:
        assert (run.ok, run.observed) == (True, "exit 0")
        assert _until(lambda: not _sleeps("9874"), 2)
        assert time.monotonic() - t0 < 5  # SIGTERM ends sleep at once: no grace waited out
    finally:
        _kill_sleeps("9874")


# ---- the alert receiver takes what the lab's real Alertmanager sends, and nothing forged ----

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(ALERTMANAGER is None, reason="Alertmanager is not installed")
def test_the_labs_alertmanager_delivers_with_its_token_and_a_forgery_is_refused(
    tmp_path: Path,
) -> None:
    """Alertmanager (Debian's 0.25) with the alertmanager.yml `lab up` writes: its notification
    carries the lab's token and is taken; a POST without it is refused."""
    assert ALERTMANAGER is not None
    inv = load_inventory(builtin_lab())  # time scale x100: group_wait 300 ms
    state = tmp_path / "state"
    rport, aport = _free_port(), _free_port()
    with WebhookReceiver("127.0.0.1", rport, None, None) as probe:
        url = probe.url
    adir = write_alertmanager(state / "alertmanager", inv, url).parent
    token = receiver_token(state)
    assert token is not None
    am = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={adir / 'alertmanager.yml'}",
            f"--storage.path={adir / 'data'}",
            f"--web.listen-address=127.0.0.1:{aport}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        with WebhookReceiver("127.0.0.1", rport, None, token) as rcv:
            forged = httpx.post(rcv.url, json={"alerts": []}, trust_env=False)
            assert forged.status_code == 401
            api = f"http://127.0.0.1:{aport}"
            assert _until(lambda: _answers(api + "/-/ready"), 30), "Alertmanager never ready"
            alert = [{"labels": {"alertname": "TokenCheck", "gameday_lab": "local"}}]
            httpx.post(api + "/api/v2/alerts", json=alert, trust_env=False).raise_for_status()
            got = rcv.wait_for(lambda a: a.alertname == "TokenCheck", 30)
            assert got is not None and got.status == "firing"
            assert rcv.refused == 1
    finally:
        am.terminate()
        am.wait(10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False
