"""The local lab's driver: brings the supervisor daemon up and down and talks to it over its
unix socket. Implements runner.labs.base.LabDriver."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from runner.errors import LabError, LabNotUp
from runner.inventory import Inventory, Node
from runner.labs.base import Change, ChangeKind, LabEvent, LogLine, NodeConfig, NodeState
from runner.scenario import LabKind, LogSource, NodeStatus

# What a node's process inherits from the supervisor's environment; the rest comes from the
# inventory, as a container gets only what its spec says.
PASSTHROUGH_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "GAMEDAY_MODELS_PATH",
)


def resolve_command(name: str) -> str | None:
    """A program on PATH, or installed beside this interpreter (an un-activated venv)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    if Path(name).is_file():
        return name
    return None


def default_state_root() -> Path:
    root = os.environ.get("GAMEDAY_STATE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "gameday"


class LocalLab:
    kind = LabKind.LOCAL

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        lab = inventory.lab
        self._state_dir = Path(lab.state_dir) if lab.state_dir else default_state_root() / lab.name
        self._client: httpx.Client | None = None

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    @property
    def sock(self) -> Path:
        return self._state_dir / "supervisor.sock"

    # ---- transport --------------------------------------------------------------------------

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                transport=httpx.HTTPTransport(uds=str(self.sock)),
                base_url="http://supervisor",
                timeout=30.0,
            )
        return self._client

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._http().request(method, path, **kw)
            r.raise_for_status()
        except httpx.TransportError as exc:
            raise LabNotUp(
                f"local lab {self.inventory.lab.name!r} is not up (no supervisor at {self.sock})",
                hint=f"gameday lab up --lab {self.inventory.path}",
            ) from exc
        except httpx.HTTPStatusError as exc:
            raise LabError(
                f"local lab supervisor refused {method} {path}: "
                f"{exc.response.status_code} {exc.response.text[:200]}"
            ) from exc
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    # ---- lifecycle --------------------------------------------------------------------------

    def is_up(self) -> bool:
        if not self.sock.exists():
            return False
        try:
            self._call("GET", "/status")
        except LabError:
            return False
        return True

    def preflight(self) -> None:
        """Refuse to start a lab that cannot work, before starting anything."""
        cmd = self.inventory.lab.engine_command
        if cmd and resolve_command(cmd[0]) is None:
            raise LabError(
                f"{self.inventory.path}: engine command {cmd[0]!r} (gameday_lab.engine_command) "
                "is not on PATH",
                hint="install the project (pip install -e .) so that `vllm-lab` exists, or fix "
                "engine_command",
            )
        for n in self.inventory.nodes:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((n.address, n.port))
                except OSError as exc:
                    raise LabError(
                        f"{self.inventory.path}: node {n.name} cannot listen on "
                        f"{n.address}:{n.port}: {exc.strerror}",
                        hint="another program uses that port: stop it, or change gameday_port /"
                        " gameday_address of this host in the inventory",
                    ) from exc

    def up(self) -> None:
        if self.is_up():
            return
        self.preflight()
        self._state_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "time_scale": self.inventory.lab.time_scale,
            "nodes": [self._node_spec(n) for n in self.inventory.nodes],
        }
        (self._state_dir / "lab.json").write_text(json.dumps(spec, indent=2))
        log = (self._state_dir / "supervisor.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.labs.local.supervisor", str(self._state_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not self.is_up():
            if proc.poll() is not None:
                raise LabError(
                    f"the local lab supervisor exited with code {proc.returncode}; "
                    f"see {self._state_dir / 'supervisor.log'}"
                )
            if time.monotonic() > deadline:
                proc.kill()
                raise LabError("the local lab supervisor did not answer within 20 s")
            time.sleep(0.02)  # start-up only: the socket appears once

    def _node_spec(self, n: Node) -> dict[str, Any]:
        base = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        base |= {
            "PYTHONUNBUFFERED": "1",
            "GAMEDAY_TIME_SCALE": str(self.inventory.lab.time_scale),
            "GAMEDAY_GPU": n.gpu.type,
            "GAMEDAY_GPU_COUNT": str(n.gpu.count),
        }
        cmd = list(self.inventory.lab.engine_command)
        cmd[0] = resolve_command(cmd[0]) or cmd[0]
        return {
            "name": n.name,
            "address": n.address,
            "port": n.port,
            "restart": n.restart.value,
            "command": cmd,
            "args": n.rendered_args(),
            "env": dict(n.env),
            "base_env": base,
        }

    def down(self) -> None:
        if not self.is_up():
            self._reap_stale()
            return
        pid = int(self._call("GET", "/status")["pid"])
        with contextlib.suppress(LabError):
            self._call("POST", "/shutdown")
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self._close()

    def _reap_stale(self) -> None:
        pidfile = self._state_dir / "supervisor.pid"
        if pidfile.exists():
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            pidfile.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # ---- observation ------------------------------------------------------------------------

    def states(self) -> dict[str, NodeState]:
        raw = self._call("GET", "/status")["nodes"]
        return {k: _state(v) for k, v in raw.items()}

    def state(self, node: str) -> NodeState:
        return self.states()[node]

    def logs(self, node: str, source: LogSource) -> list[LogLine]:
        st = self.state(node)
        if source is LogSource.PREVIOUS:
            if st.last_exit is None:
                return []
            inc = st.last_exit.incarnation
        else:
            inc = st.incarnation
        return self.logs_of(node, inc)

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        text = self._call("GET", f"/nodes/{node}/logs", params={"incarnation": incarnation})
        out = []
        for line in str(text).splitlines():
            ts, _, rest = line.partition(" ")
            out.append(LogLine(ts=datetime.fromisoformat(ts), text=rest))
        return out

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        raw = self._call(
            "GET",
            "/events",
            params={"since": since, "timeout": max(timeout, 0)},
            timeout=timeout + 10,
        )
        return [LabEvent.model_validate({**e, "type": e["type"]}) for e in raw]

    def last_event_seq(self) -> int:
        return int(self._call("GET", "/status")["last_seq"])

    def url(self, node: str) -> str:
        n = self.inventory.node(node)
        return f"http://{n.address}:{n.port}"

    # ---- changes ----------------------------------------------------------------------------

    def config(self, node: str) -> NodeConfig:
        raw = self._call("GET", f"/nodes/{node}/config")
        return NodeConfig(args=tuple(raw["args"]), env=raw["env"])

    def baseline_config(self, node: str) -> NodeConfig:
        n = self.inventory.node(node)
        return NodeConfig(args=tuple(n.rendered_args()), env=dict(n.env))

    def apply(self, change: Change) -> None:
        if change.kind is not ChangeKind.NODE_CONFIG:
            raise LabError(f"the local lab cannot apply a {change.kind.value} change")
        self._call(
            "PUT",
            f"/nodes/{change.node}/config",
            json={"args": list(change.after.args), "env": change.after.env},
        )

    def restart(self, nodes: Sequence[str]) -> None:
        self._call("POST", "/restart", json={"nodes": list(nodes)})

    def service_links(self, node: str, service: str, port: int, enabled: bool) -> Change:
        """No Kubernetes here: inject (or remove) the variables the kubelet would inject for a
        Service named `service` when the pod has enableServiceLinks: true."""
        before = self.config(node)
        injected = kubernetes_service_env(service, cluster_ip(service), port)
        env = {k: v for k, v in before.env.items() if k not in injected}
        if enabled:
            env |= injected
        verb = "injected" if enabled else "removed"
        note = (
            f"local lab emulation: no Kubernetes here, so the lab {verb} the "
            f"{len(injected)} variables the kubelet injects for a Service named {service!r} "
            f"with enableServiceLinks: true ({', '.join(sorted(injected))})"
        )
        return Change(
            kind=ChangeKind.NODE_CONFIG,
            node=node,
            before=before,
            after=NodeConfig(args=before.args, env=env),
            note=note,
        )


def cluster_ip(service: str) -> str:
    """A stable address in the EKS default service range 10.100.0.0/16."""
    h = hashlib.sha256(service.encode()).digest()
    return f"10.100.{h[0]}.{max(h[1], 1)}"


def kubernetes_service_env(
    service: str, ip: str, port: int, port_name: str = "http"
) -> dict[str, str]:
    """The Docker-links-style variables the kubelet injects for one Service
    (pkg/kubelet/envvars)."""
    name = service.upper().replace("-", "_")
    proto = "TCP"
    return {
        f"{name}_SERVICE_HOST": ip,
        f"{name}_SERVICE_PORT": str(port),
        f"{name}_SERVICE_PORT_{port_name.upper().replace('-', '_')}": str(port),
        f"{name}_PORT": f"tcp://{ip}:{port}",
        f"{name}_PORT_{port}_{proto}": f"tcp://{ip}:{port}",
        f"{name}_PORT_{port}_{proto}_PROTO": proto.lower(),
        f"{name}_PORT_{port}_{proto}_PORT": str(port),
        f"{name}_PORT_{port}_{proto}_ADDR": ip,
    }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours is not alive
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    return True


def _state(v: dict[str, Any]) -> NodeState:
    le = v.get("last_exit")
    return NodeState.model_validate(
        {
            "name": v["name"],
            "status": NodeStatus(v["status"]),
            "generation": v["generation"],
            "incarnation": v["incarnation"],
            "restarts": v["restarts"],
            "ready": v["ready"],
            "pid": v["pid"],
            "started_at": v["started_at"],
            "first_output_at": v["first_output_at"],
            "reason": v["reason"],
            "last_exit": None
            if le is None
            else {
                k: le[k]
                for k in ("incarnation", "code", "started_at", "first_output_at", "finished_at")
            },
        }
    )
