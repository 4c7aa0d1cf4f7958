"""Trust on shared machines, where a real process is needed: lab traffic with a proxy in the
environment, a `command` step's processes after its runner is killed, the alert receiver on a
socket."""

from __future__ import annotations

import ast
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

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
            and node.func.attr in {"Client", "get", "post", "request", "stream", "put", "delete"}
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
    """Every client the run, the labs and the watchdog build for a lab's own addresses."""
    root = Path(__file__).resolve().parents[3] / "runner"
    found = [
        (str(f.relative_to(root)), line, off)
        for folder in ("run", "labs", "watchdog")
        for f in sorted((root / folder).rglob("*.py"))
        for line, off in _lab_http_calls(f)
    ]
    assert len(found) >= 7
    assert [(f, line) for f, line, off in found if not off] == []
