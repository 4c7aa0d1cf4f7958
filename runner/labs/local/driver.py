"""The local lab's driver: brings the supervisor daemon up and down and talks to it over its
unix socket. Implements runner.labs.base.LabDriver."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pydantic

from runner import procstat
from runner.errors import LabError, LabNotUp
from runner.fsutil import private_dir, write_private
from runner.labs.base import (
    Change,
    ChangeKind,
    ExitInfo,
    GpuProcess,
    LabDriver,
    LabEvent,
    LogLine,
    NodeConfig,
    NodeState,
    PartDeath,
    ProcessState,
    Value,
    last_lines,
)
from runner.labs.common import helpers as common
from runner.labs.common.alertmanager_config import (
    alertmanager_listen,
    local_command,
    local_program,
    receiver_listen,
    resend_delay,
    webhook_url,
    write_alertmanager,
)
from runner.labs.common.network import configured_addresses, ensure_free
from runner.labs.common.prometheus_config import write_prometheus
from runner.programs import command_argv, resolve_command
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import ERA_ENV, Inventory, Node, Role
from runner.spec.kinds import LabKind
from vllmfacts import xid

SUPERVISOR = "runner.labs.local.supervisor"  # the daemon's module, run with `python -m`

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


# how the lab's own processes are named in a report
_PARTS = {"prometheus": "Prometheus", "alertmanager": "Alertmanager"}
TAIL_BYTES = 16 * 1024  # of a dead process's log, read for its last lines


class LocalLab(LabDriver):
    kind = LabKind.LOCAL
    label = "local lab"

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.capabilities = common.host_capabilities(inventory)
        lab = inventory.lab
        self._state_dir = common.state_dir(lab)
        self._client: httpx.Client | None = None
        self.artifacts_dir: Path | None = None  # the local lab keeps no records of its own

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
                trust_env=False,  # the control socket is never proxied
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
        if cmd and command_argv(cmd) is None:
            raise LabError(
                f"{self.inventory.path}: engine command {cmd[0]!r} (gameday_lab.engine_command) "
                "is not installed",
                hint=f"set it up: {self.inventory.lab.engine_setup}"
                if self.inventory.lab.engine_setup
                else "install the project (pip install -e .) so that `vllm-lab` exists, or fix "
                "engine_command",
            )
        mon = self.inventory.lab.monitoring
        if mon is not None:
            for program, package in (
                (mon.prometheus_command, "prometheus"),
                (mon.exporter_command, "prometheus-node-exporter"),
                (local_program(mon), "prometheus-alertmanager"),
            ):
                if resolve_command(program) is None:
                    raise LabError(
                        f"{self.inventory.path}: the lab's monitoring needs {program!r}, which is "
                        "not installed",
                        hint=f"apt-get install -y {package} (or remove gameday_lab.monitoring)",
                    )
        for host, port, what in self._listeners():
            ensure_free(host, port, f"{self.inventory.path}: {what} cannot listen on")

    def _listeners(self) -> list[tuple[str, int, str]]:
        out = [(n.address, n.port, f"node {n.name}") for n in self.inventory.nodes]
        mon = self.inventory.lab.monitoring
        if mon is not None:
            host, _, port = mon.prometheus_listen.rpartition(":")
            out.append((host, int(port), "Prometheus"))
            host, _, port = alertmanager_listen(mon).rpartition(":")
            out.append((host, int(port), "Alertmanager"))
            for n in self.inventory.nodes:
                for addr in (n.management_address, n.overlay_address):
                    if addr:
                        out.append((addr, mon.exporter_port, f"node {n.name}'s exporter"))
        return out

    def up(self) -> None:
        if self.is_up():
            return
        self.preflight()
        private_dir(self._state_dir)  # the control socket and the nodes' environments live here
        for n in self.inventory.nodes:  # the lab coming up is each node's boot: a new kernel log
            xid.boot(self.gpu_dir(n.name))
        addresses = self._addresses()
        spec = {
            "time_scale": self.inventory.lab.time_scale,
            "nodes": [self._node_spec(n, addresses) for n in self.inventory.nodes],
            "services": self._services(),
        }
        (self._state_dir / "addresses.json").write_text(json.dumps(addresses))
        if self.inventory.lab.monitoring is not None:
            self._write_prometheus(common.SCRAPED_NETWORK)
            # a new lab, a new notification log: Alertmanager's of the lab's previous life
            # (kept in its data folder) holds back a firing it believes it already delivered
            # for its repeat_interval, when the resolution never reached a receiver
            shutil.rmtree(self._state_dir / "alertmanager" / "data", ignore_errors=True)
            # and new series: Prometheus evaluates its rules from its start, before its first
            # scrape, on what its data holds within the lookback (5 min); the previous life's
            # last samples (an engine down as that lab stopped) would fire an alert the new lab
            # never earned, active since before any injection
            shutil.rmtree(self._pdir / "data", ignore_errors=True)
        write_private(self._state_dir / "lab.json", json.dumps(spec, indent=2))
        log = (self._state_dir / "supervisor.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, str(self._state_dir.resolve())],
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

    @property
    def _pdir(self) -> Path:
        return self._state_dir / "prometheus"

    @property
    def _prom_hint(self) -> str:
        return f"see {self._state_dir / 'services' / 'prometheus.log'}"

    def monitoring_ready(self, timeout_s: float) -> None:
        common.monitoring_ready(
            self.inventory, self._pdir, timeout_s, self._prom_hint, self.dead_part
        )

    def dead_part(self) -> PartDeath | None:
        """The first of the lab's own processes beside the engines (Prometheus, Alertmanager,
        a node's exporter: those the supervisor keeps running) that has exited on its own since
        it was started, with the last lines of its log."""
        if self.inventory.lab.monitoring is None:
            return None
        for owner, procs in self.aux_processes().items():
            for name, p in procs.items():
                if not p.get("restart") or not p.get("exits"):
                    continue
                try:
                    with open(p["log"], "rb") as f:
                        f.seek(max(f.seek(0, os.SEEK_END) - TAIL_BYTES, 0))
                        tail = f.read().decode(errors="replace")
                except OSError as exc:
                    tail = f"(its log {p['log']} cannot be read: {exc.strerror})"
                return PartDeath(
                    part=_PARTS.get(name, name) + ("" if owner == "lab" else f" of node {owner}"),
                    exit_code=p.get("last_exit_code"),
                    restarts=max(int(p["exits"]) - (0 if p.get("running") else 1), 0),
                    last_lines=last_lines(tail),
                    log=str(p["log"]),
                )
        return None

    def _base_env(self, n: Node) -> dict[str, str]:
        base = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        return base | {
            "PYTHONUNBUFFERED": "1",
            "GAMEDAY_TIME_SCALE": str(self.inventory.lab.time_scale),
            ERA_ENV: self.inventory.lab.vllm_version.value,
            "GAMEDAY_GPU": n.gpu.type,
            "GAMEDAY_GPU_COUNT": str(n.gpu.count),
            "GAMEDAY_GPU_STATE": str(self.gpu_dir(n.name)),
        }

    def reboot_kernel_log(self, node: str) -> None:
        xid.boot(self.gpu_dir(node))

    def xid_broke_at(self, node: str) -> datetime | None:
        try:
            text = (self.gpu_dir(node) / xid.FAULT_FILE).read_text()
        except OSError:
            return None
        at = xid.broke_at(text)
        return None if at is None else datetime.fromtimestamp(at, UTC)

    def gpu_dir(self, node: str) -> Path:
        return self._state_dir / "nodes" / node / "gpu"

    def _addresses(self) -> dict[str, dict[str, str]]:
        """Current address of every node on each network (the management one can change)."""
        f = self._state_dir / "addresses.json"
        if f.exists():
            return dict(json.loads(f.read_text()))
        return configured_addresses(self.inventory)

    def _exporter(self, n: Node, addresses: dict[str, dict[str, str]]) -> dict[str, Any]:
        mon = self.inventory.lab.monitoring
        assert mon is not None
        listen = [
            f"--web.listen-address={a}:{mon.exporter_port}" for a in addresses[n.name].values()
        ]
        # the textfile collector reads the node's kernel-log watch (vllmfacts.xid), which lives
        # beside the node's GPU state; node-exporter complains at every scrape if it is missing
        textfile = self.gpu_dir(n.name) / xid.TEXTFILE_DIR
        textfile.mkdir(parents=True, exist_ok=True)
        cmd = [
            resolve_command(mon.exporter_command) or mon.exporter_command,
            *listen,
            "--collector.disable-defaults",
            "--collector.loadavg",
            "--collector.meminfo",
            "--collector.textfile",
            f"--collector.textfile.directory={textfile}",
        ]
        return {"name": "node-exporter", "command": cmd, "env": self._base_env(n), "restart": True}

    def _node_spec(self, n: Node, addresses: dict[str, dict[str, str]]) -> dict[str, Any]:
        cmd = command_argv(self.inventory.lab.engine_command) or list(
            self.inventory.lab.engine_command
        )
        aux = []
        if self.inventory.lab.monitoring is not None and addresses.get(n.name):
            aux.append(self._exporter(n, addresses))
        return {
            "name": n.name,
            "address": n.address,
            "port": n.port,
            "restart": n.restart.value,
            "command": cmd,
            "args": n.rendered_args(),
            "env": dict(n.env),
            "base_env": self._base_env(n),
            "aux": aux,
            "http_health": n.role is not Role.WORKER,
        }

    def _services(self) -> list[dict[str, Any]]:
        mon = self.inventory.lab.monitoring
        if mon is None:
            return []
        pdir = self._state_dir / "prometheus"
        cmd = [
            resolve_command(mon.prometheus_command) or mon.prometheus_command,
            f"--config.file={pdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={pdir / 'data'}",
            f"--web.listen-address={mon.prometheus_listen}",
            "--web.enable-lifecycle",
            f"--rules.alert.resend-delay={resend_delay(self.inventory)}",
            "--log.level=warn",
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        adir = self._state_dir / "alertmanager"
        write_alertmanager(adir, self.inventory, webhook_url(receiver_listen(self.inventory)))
        am = local_command(
            self.inventory,
            adir,
            resolve_command(local_program(mon)) or local_program(mon),
        )
        return [
            {"name": "prometheus", "command": cmd, "env": env, "restart": True},
            {"name": "alertmanager", "command": am, "env": env, "restart": True},
        ]

    def _write_prometheus(self, exporter_network: str) -> None:
        # a static scrape config names the addresses the operator configured, not the ones
        # DHCP handed out since
        addresses = configured_addresses(self.inventory)
        mon = self.inventory.lab.monitoring
        assert mon is not None
        write_prometheus(
            self._pdir,
            self.inventory,
            exporter_network,
            addresses,
            alertmanager=alertmanager_listen(mon),
        )

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
        """Stop a supervisor that no longer answers. Its pid file may be stale and the pid
        since reused by anything: only a process that is this lab's supervisor is signalled."""
        pidfile = self._state_dir / "supervisor.pid"
        if pidfile.exists():
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                pid = int(pidfile.read_text())
                if _is_supervisor(pid, self._state_dir):
                    os.kill(pid, signal.SIGTERM)
            pidfile.unlink(missing_ok=True)

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # ---- observation ------------------------------------------------------------------------

    def states(self) -> dict[str, NodeState]:
        raw = self._call("GET", "/status")["nodes"]
        return {k: _state(v) for k, v in raw.items()}

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        text = self._call("GET", f"/nodes/{node}/logs", params={"incarnation": incarnation})
        return common.stamped_lines(str(text))

    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]:
        """Every line the node logged since `since`, across incarnations (and its aux
        processes are not included: they are not the node's engine)."""
        last = self.states()[node].incarnation
        out: list[LogLine] = []
        for inc in range(last, 0, -1):
            lines = self.logs_of(node, inc)
            out = lines + out
            if since is not None and lines and lines[0].ts < since:
                break
        return [ln for ln in out if since is None or ln.ts >= since]

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        raw = self._call(
            "GET",
            "/events",
            params={"since": since, "timeout": max(timeout, 0)},
            timeout=timeout + 10,
        )
        try:
            return [LabEvent.model_validate(e) for e in raw]
        except pydantic.ValidationError as exc:
            raise LabError(
                f"lab {self.inventory.lab.name!r}: its supervisor sends events this version of "
                f"gameday does not read ({exc.errors()[0]['msg']})",
                hint=f"a lab brought up by another version: gameday lab down --lab "
                f"{self.inventory.path}, then up again",
            ) from None

    def last_event_seq(self) -> int:
        return int(self._call("GET", "/status")["last_seq"])

    def url(self, node: str) -> str:
        return self.inventory.node(node).url

    # ---- changes ----------------------------------------------------------------------------

    def config(self, node: str) -> NodeConfig:
        raw = self._call("GET", f"/nodes/{node}/config")
        return NodeConfig(args=tuple(raw["args"]), env=raw["env"])

    def current(self, change: Change) -> NodeConfig | ProcessState | Value:
        """The subject of `change` as it is now."""
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        if change.kind is ChangeKind.PROCESS:
            aux = self._call("GET", f"/nodes/{change.node}/aux").get(change.subject)
            running = bool(aux and aux["running"])
            return ProcessState(running=running, command=tuple(aux["command"]) if aux else ())
        if change.kind is ChangeKind.ADDRESS:
            addr = self._addresses().get(change.node, {}).get(change.subject)
            if addr is None:
                raise LabError(f"node {change.node} has no address on the {change.subject} network")
            return Value(value=addr)
        return Value(value=(self._state_dir / "prometheus" / "scrape_network").read_text())

    def apply(self, change: Change) -> None:
        after = change.after
        if change.kind is ChangeKind.NODE_CONFIG and isinstance(after, NodeConfig):
            self._call(
                "PUT",
                f"/nodes/{change.node}/config",
                json={"args": list(after.args), "env": after.env},
            )
        elif change.kind is ChangeKind.PROCESS and isinstance(after, ProcessState):
            if after.running:
                node = self.inventory.node(change.node)
                body = {
                    "name": change.subject,
                    "command": list(after.command),
                    "env": self._base_env(node),
                    "restart": False,
                }
                self._call("POST", f"/nodes/{change.node}/aux", json=body)
            else:
                self._call("DELETE", f"/nodes/{change.node}/aux", params={"name": change.subject})
        elif change.kind is ChangeKind.ADDRESS and isinstance(after, Value):
            self._move(change.node, change.subject, after.value)
        elif change.kind is ChangeKind.SCRAPE_TARGETS and isinstance(after, Value):
            common.apply_scrape_targets(self.inventory, self._write_prometheus, after.value)
        else:
            raise LabError(f"the local lab cannot apply a {change.kind.value} change")

    def _move(self, node: str, network: str, address: str) -> None:
        """DHCP hands the node a new address: its exporter now answers there and not at the old
        one. Serving (on the overlay network) is not touched."""
        addresses = self._addresses()
        addresses[node][network] = address
        (self._state_dir / "addresses.json").write_text(json.dumps(addresses))
        n = self.inventory.node(node)
        if self.inventory.lab.monitoring is not None:
            self._call("POST", f"/nodes/{node}/aux", json=self._exporter(n, addresses))

    def process_command(self, command: Sequence[str]) -> tuple[str, ...]:
        return tuple(command_argv(command) or command)

    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        self._call(
            "POST", f"/nodes/{node}/signal", json={"process": process.value, "signal": signal.value}
        )

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        """What `vllm-lab smi --json` lists on the node, read in-process: the node's GPU is a
        directory of this machine's."""
        from vllmfacts.gpu import SharedGpu, gpu_types

        n = self.inventory.node(node)
        shared = SharedGpu(self.gpu_dir(node), gpu_types()[n.gpu.type])
        procs = [{"pid": p.pid, "name": p.name, "mib": p.mib} for p in shared.processes()]
        return common.gpu_processes_of(json.dumps({"processes": procs}))

    def leftovers(self) -> list[str]:
        """Everything that differs from the lab's baseline (empty when clean): node configs,
        processes beyond the lab's own, moved addresses, a re-pointed scrape config, nodes not
        serving."""
        strays = []
        for owner, procs in self.aux_processes().items():
            extra = sorted(set(procs) - {"node-exporter", "prometheus", "alertmanager"})
            if extra:
                strays.append(f"{owner}: processes the lab did not start: {extra}")
        moved = common.moved_addresses(configured_addresses(self.inventory), self._addresses())
        scrape: list[str] = []
        if self.inventory.lab.monitoring is not None:
            network = (self._pdir / "scrape_network").read_text()
            scrape = common.scrape_drift(self.inventory, network)
        return common.leftovers(self, [*strays, *moved, *scrape])

    def leftover_objects(self) -> list[str]:
        """The supervisor (which holds every node and auxiliary process), if it runs."""
        pidfile = self._state_dir / "supervisor.pid"
        with contextlib.suppress(ValueError, OSError):
            pid = int(pidfile.read_text())
            if _is_supervisor(pid, self._state_dir):
                return [f"supervisor pid {pid} of lab {self.inventory.lab.name!r}"]
        return []

    def aux_processes(self) -> dict[str, dict[str, Any]]:
        return dict(self._call("GET", "/status")["aux"])

    def restart(self, nodes: Sequence[str]) -> None:
        self._call("POST", "/restart", json={"nodes": list(nodes)})

    def stop(self, node: str) -> None:
        self._call("POST", f"/nodes/{node}/stop")

    def start(self, node: str) -> None:
        self._call("POST", f"/nodes/{node}/start")


def _is_supervisor(pid: int, state_dir: Path) -> bool:
    """Whether `pid` is a process of this user's, started by `up` as the supervisor of the lab
    in `state_dir`."""
    proc = Path(f"/proc/{pid}")
    try:
        owner = proc.stat().st_uid
        argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return False
    want = [b"-m", SUPERVISOR.encode(), os.fsencode(state_dir.resolve())]
    return owner == os.getuid() and argv[-3:] == want


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
    # nor is another's zombie: a supervisor that `lab up` started belongs to init once that
    # command has ended, and an init may take seconds to reap it
    return procstat.running(pid)


def _state(v: dict[str, Any]) -> NodeState:
    """A node's state from the supervisor's snapshot (its last exit carries more than ExitInfo)."""
    le = v["last_exit"]
    last = None if le is None else {k: le[k] for k in ExitInfo.model_fields}
    return NodeState.model_validate({**v, "last_exit": last})
