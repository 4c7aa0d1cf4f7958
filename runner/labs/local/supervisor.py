"""The local lab's supervisor daemon: a process manager with container-like semantics.

    python -m runner.labs.local.supervisor STATE_DIR

Reads STATE_DIR/lab.json, runs every node's engine as a child process and keeps, per node:
- restart policy no / on-failure / always, with CrashLoopBackOff-style back-off (10 s doubling to
  300 s, in real-world seconds divided by the lab's time scale); status `crash_looping` while
  waiting;
- incarnations: each start gets a number and a log file `nodes/<node>/<n>.log`, every line
  stamped with the UTC time the supervisor read it (like `docker logs -t`); exit code and exit time
  of every incarnation;
- generations: applying a new config (args/env) replaces the node as re-applying a Deployment
  does, and resets its restart count;
- readiness: GET /health on the node's URL every probe period.

Control API (runner.labs.local.control): HTTP over the unix socket STATE_DIR/supervisor.sock.
Events are pushed to long-poll waiters the moment they happen (no polling on the runner's side).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from runner.fsutil import private_dir, write_private
from runner.labs.lifecycle import EventType, ExitInfo, LabEvent, crash_loop_backoff_s
from runner.labs.local.control import ControlApi
from runner.procstat import stat_fields

BACKOFF_RESET_S = 600.0
PROBE_PERIOD_S = 10.0
PROBE_TIMEOUT_S = 1.0  # wall seconds: the kubelet's default timeoutSeconds
STOP_GRACE_S = 3.0  # lab seconds
MAX_LINE = 64 * 1024  # bytes of a log line kept; the rest is counted, not stored
READ_CHUNK = 64 * 1024


def now() -> datetime:
    return datetime.now(UTC)


def exited(last: dict[str, Any]) -> dict[str, Any]:
    """An EXITED event's payload from a node's last exit record."""
    info = ExitInfo.model_validate({k: last[k] for k in ExitInfo.model_fields})
    took = None
    if last.get("stop_requested_at"):
        asked = datetime.fromisoformat(last["stop_requested_at"])
        took = (info.finished_at - asked).total_seconds()
    return {"exit": info, "stopped": last["stopped"], "stop_took_s": took}


async def health_ok(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """GET /health answers 200 (the kubelet's httpGet probe takes 200-399; the lab's engines
    answer 200 or 503). One request of the lab's
    own on loopback, every probe period: written on asyncio's streams, so that the daemon
    starts without an HTTP client library (httpx and its async back-ends cost each lab's start
    60 ms or more of CPU)."""
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(
                f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            status = (await reader.readline()).split()
            return len(status) >= 2 and status[1] == b"200"
    except (OSError, TimeoutError):
        return False
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), timeout_s)


def iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts else None


@dataclass
class Node:
    name: str
    address: str
    port: int
    restart: str
    http_health: bool
    command: list[str]
    args: list[str]
    env: dict[str, str]
    base_env: dict[str, str]
    dir: Path
    generation: int = 0
    incarnation: int = 0
    restarts: int = 0
    status: str = "pending"
    reason: str = ""
    ready: bool = False
    proc: asyncio.subprocess.Process | None = None
    started_at: datetime | None = None
    first_output_at: datetime | None = None
    last_exit: dict[str, Any] | None = None
    wanted: bool = True
    stopping: bool = False
    stop_requested_at: datetime | None = None
    task: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def snapshot(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "generation": self.generation,
            "incarnation": self.incarnation,
            "restarts": self.restarts,
            "ready": self.ready,
            "pid": self.proc.pid if self.proc and self.proc.returncode is None else None,
            "started_at": iso(self.started_at),
            "first_output_at": iso(self.first_output_at),
            "reason": self.reason,
            "last_exit": self.last_exit,
        }


async def terminate(proc: asyncio.subprocess.Process | None) -> None:
    """SIGTERM to the process's group, SIGKILL after the grace period; returns once it is gone,
    and every other process of its group too (an engine's core, a stray program's children),
    which may outlive it by a moment."""
    if proc is None or proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    try:
        await asyncio.wait_for(proc.wait(), timeout=STOP_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    # SIGKILL once the grace is over; a process that not even that ends (stuck in the kernel)
    # is left after one more grace rather than holding the stop forever
    while group_running(proc.pid) and time.monotonic() < deadline + STOP_GRACE_S:
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        await asyncio.sleep(0.01)


def group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. A zombie has exited: once its parent is
    gone it waits for init to collect its status, which on some machines takes seconds."""
    for entry in os.scandir("/proc"):
        fields = stat_fields(entry.name) if entry.name.isdigit() else None
        if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@dataclass
class Aux:
    """A process that is not the node's engine: its exporter, a stray GPU program, or a lab
    service like Prometheus. `restart` keeps it running until stopped."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    restart: bool
    proc: asyncio.subprocess.Process | None = None
    wanted: bool = True
    task: asyncio.Task[None] | None = None
    # its exits on its own (not stopped by the lab), and the last one's status: a lab service
    # that exits has died, even when `restart` has started it again
    exits: int = 0
    last_exit_code: int | None = None

    def snapshot(self) -> dict[str, Any]:
        running = self.proc is not None and self.proc.returncode is None
        return {
            "name": self.name,
            "command": self.command,
            "pid": self.proc.pid if running and self.proc else None,
            "running": running,
            "exit_code": None if running or self.proc is None else self.proc.returncode,
            "restart": self.restart,
            "exits": self.exits,
            "last_exit_code": self.last_exit_code,
            "log": str(self.log),
        }

    async def run(self) -> None:
        while self.wanted:
            with self.log.open("ab") as out:
                try:
                    self.proc = await asyncio.create_subprocess_exec(
                        *self.command,
                        env=self.env,
                        stdout=out,
                        stderr=asyncio.subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    out.write(f"exec {self.command[0]}: {exc.strerror}\n".encode())
                    self.exits, self.last_exit_code = self.exits + 1, 127
                    return
                rc = await self.proc.wait()
            if self.wanted:
                self.exits, self.last_exit_code = self.exits + 1, rc if rc >= 0 else 128 - rc
            if not self.restart:
                return
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self.wanted = True
        self.task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        self.wanted = False
        await terminate(self.proc)
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


class Supervisor:
    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        spec = json.loads((state_dir / "lab.json").read_text())
        self.scale = float(spec["time_scale"])
        self.nodes: dict[str, Node] = {}
        for n in spec["nodes"]:
            d = state_dir / "nodes" / n["name"]
            d.mkdir(parents=True, exist_ok=True)
            self.nodes[n["name"]] = Node(
                name=n["name"],
                address=n["address"],
                port=n["port"],
                restart=n["restart"],
                http_health=n.get("http_health", True),
                command=n["command"],
                args=n["args"],
                env=n["env"],
                base_env=n["base_env"],
                dir=d,
            )
        self.aux: dict[str, dict[str, Aux]] = {name: {} for name in self.nodes}
        self.aux["lab"] = {}
        for n in spec["nodes"]:
            for a in n.get("aux", []):
                self.add_aux(n["name"], a)
        for a in spec.get("services", []):
            self.add_aux("lab", a)
        self.events: list[dict[str, Any]] = []
        self.cond = asyncio.Condition()
        self.events_file = (state_dir / "events.jsonl").open("a", buffering=1)
        self.server: uvicorn.Server | None = None

    def add_aux(self, owner: str, a: dict[str, Any]) -> Aux:
        d = self.dir / "nodes" / owner if owner != "lab" else self.dir / "services"
        d.mkdir(parents=True, exist_ok=True)
        aux = Aux(
            name=a["name"],
            command=list(a["command"]),
            env=dict(a["env"]),
            log=d / f"{a['name']}.log",
            restart=bool(a.get("restart", False)),
        )
        self.aux[owner][aux.name] = aux
        return aux

    def lab_s(self, real_s: float) -> float:
        return real_s / self.scale

    async def emit(self, node: str, type_: EventType, **data: Any) -> None:
        """An event about a node's engine: published, and the node's state persisted."""
        self.persist(self.nodes[node])
        await self.emit_lab(node, type_, **data)

    async def emit_lab(self, owner: str, type_: EventType, **payload: Any) -> None:
        """An event (about anything the lab runs): recorded, then pushed to every waiter.
        `payload`: LabEvent's fields for this type."""
        event = LabEvent(seq=len(self.events) + 1, ts=now(), node=owner, type=type_, **payload)
        ev = event.model_dump(mode="json", exclude_defaults=True)
        self.events.append(ev)
        self.events_file.write(json.dumps(ev) + "\n")
        async with self.cond:
            self.cond.notify_all()

    async def stop_aux(self) -> None:
        await asyncio.gather(*(a.stop() for d in self.aux.values() for a in d.values()))

    def persist(self, n: Node) -> None:
        tmp = n.dir / "state.json.tmp"
        tmp.write_text(json.dumps(n.snapshot()))
        tmp.replace(n.dir / "state.json")

    # ---- node lifecycle ---------------------------------------------------------------------

    def start_loop(self, n: Node) -> None:
        n.wanted = True
        n.task = asyncio.create_task(self.run_node(n))

    async def run_node(self, n: Node) -> None:
        """One generation of a node: start, watch, restart per policy, until stopped."""
        while n.wanted:
            code = await self.run_incarnation(n)
            if not n.wanted:
                return
            again = n.restart == "always" or (n.restart == "on-failure" and code != 0)
            if not again:
                n.status = "exited"
                n.reason = "Completed" if code == 0 else "Error"
                self.persist(n)
                return
            ran_for = (n.last_exit or {}).get("ran_s", 0.0)
            if ran_for >= self.lab_s(BACKOFF_RESET_S):
                n.restarts = 0
            delay = self.lab_s(crash_loop_backoff_s(n.restarts))
            n.restarts += 1
            n.status = "crash_looping"
            n.reason = "CrashLoopBackOff"
            await self.emit(n.name, EventType.BACKOFF, delay_s=delay, restarts=n.restarts)
            n.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(n.wake.wait(), timeout=delay)

    async def run_incarnation(self, n: Node) -> int:
        """Start the node's engine once, copy its output to the incarnation's log, record its
        exit: its exit code (127: it could not be started)."""
        n.incarnation += 1
        inc = n.incarnation
        log_path = n.dir / f"{inc}.log"
        n.first_output_at = None
        n.ready = False
        started = now()
        t0 = time.monotonic()
        proc = await self.spawn(n, log_path, started)
        if proc is None:
            return 127
        n.proc = proc
        n.started_at = started
        n.status = "running"
        n.reason = ""
        await self.emit(
            n.name, EventType.STARTED, incarnation=inc, pid=proc.pid, generation=n.generation
        )
        probe = asyncio.create_task(self.probe_loop(n, inc))
        await self.copy_output(n, inc, proc, log_path)
        rc = await proc.wait()
        finished = now()
        probe.cancel()
        code = rc if rc >= 0 else 128 - rc
        n.ready = False
        n.last_exit = {
            "incarnation": inc,
            "code": code,
            "started_at": started.isoformat(),
            "first_output_at": iso(n.first_output_at),
            "finished_at": finished.isoformat(),
            "ran_s": time.monotonic() - t0,
            "generation": n.generation,
            "stopped": n.stopping,
            "stop_requested_at": iso(n.stop_requested_at) if n.stopping else None,
        }
        n.status = "exited"
        n.reason = "Completed" if code == 0 else "Error"
        await self.emit(n.name, EventType.EXITED, **exited(n.last_exit))
        return code

    async def spawn(
        self, n: Node, log_path: Path, started: datetime
    ) -> asyncio.subprocess.Process | None:
        """The engine's process; None when it cannot be started (recorded as an exit 127)."""
        try:
            return await asyncio.create_subprocess_exec(
                *n.command,
                *n.args,
                env={**n.base_env, **n.env},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            finished = now()
            log_path.write_text(f"{finished.isoformat()} exec {n.command[0]}: {exc.strerror}\n")
            n.last_exit = {
                "incarnation": n.incarnation,
                "code": 127,
                "started_at": started.isoformat(),
                "first_output_at": None,
                "finished_at": finished.isoformat(),
                "ran_s": 0.0,
                "generation": n.generation,
                "stopped": False,
            }
            await self.emit(n.name, EventType.EXITED, **exited(n.last_exit))
            return None

    async def copy_output(
        self, n: Node, inc: int, proc: asyncio.subprocess.Process, log_path: Path
    ) -> None:
        """The engine's output into its log, each line stamped with when it was read; the
        first line is the incarnation's first output."""
        assert proc.stdout is not None
        with log_path.open("w", buffering=1) as out:
            async for raw in read_lines(proc.stdout):
                ts = now()
                if n.first_output_at is None:
                    n.first_output_at = ts
                    await self.emit(n.name, EventType.FIRST_OUTPUT, incarnation=inc)
                out.write(f"{ts.isoformat()} {raw.decode(errors='replace').rstrip()}\n")

    async def probe_loop(self, n: Node, inc: int) -> None:
        if not n.http_health:  # a headless worker serves no HTTP: ready once it has started
            while n.first_output_at is None:
                await asyncio.sleep(0.01)
            if n.incarnation == inc and n.status == "running":
                n.ready = True
                await self.emit(n.name, EventType.READY, incarnation=inc)
            return
        period = max(self.lab_s(PROBE_PERIOD_S), 0.02)
        while True:
            ok = await health_ok(n.address, n.port)
            if ok != n.ready and n.incarnation == inc and n.status == "running":
                n.ready = ok
                ev = EventType.READY if ok else EventType.UNREADY
                await self.emit(n.name, ev, incarnation=inc)
            await asyncio.sleep(period)

    async def stop(self, n: Node) -> None:
        """Stop the node for good. Its loop may be about to spawn an incarnation (a re-apply
        just scheduled it): keep killing whatever process it has until the loop is done."""
        n.wanted = False
        n.stopping = True
        n.stop_requested_at = datetime.now(UTC)
        n.wake.set()
        while True:
            await terminate(n.proc)
            if n.task is None or n.task.done():
                break
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(n.task), timeout=0.05)
        n.task = None
        n.stopping = False
        n.status = "exited"
        n.reason = "Stopped"
        n.ready = False

    # ---- API --------------------------------------------------------------------------------

    def app(self) -> Starlette:
        return ControlApi(self).app()

    async def main(self) -> int:
        """Serve the control API until asked to shut down or signalled, then stop every node and
        lab service: 0, or 128 + the signal that ended it."""
        sock = self.dir / "supervisor.sock"
        listener = bind_private(sock)
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        signalled: list[int] = []

        def on_signal(sig: int, _frame: FrameType | None) -> None:
            # uvicorn takes these over while it serves and, once it has stopped, raises the
            # signal again for the handler it found: this one, so that the nodes and services
            # below are stopped rather than left running without their supervisor
            signalled.append(sig)
            assert self.server is not None
            self.server.should_exit = True

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        for d in self.aux.values():
            for a in d.values():
                a.start()
        for n in self.nodes.values():
            n.generation = 1
            self.start_loop(n)
        await self.server.serve(sockets=[listener])
        await asyncio.gather(*(self.stop(n) for n in self.nodes.values()))
        await self.stop_aux()
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        (self.dir / "supervisor.pid").unlink(missing_ok=True)
        return 128 + signalled[0] if signalled else 0


def bind_private(path: Path) -> socket.socket:
    """The control socket, bound at `path` and owner-only (0600) before anyone can connect.

    Whoever can connect runs commands as this user (POST /nodes/{n}/aux) and reads the nodes'
    environments, so the socket is bound here rather than by uvicorn (which makes it 0666): the
    mode is set between bind() and listen(), while a connect() is still refused, and the socket
    lives in the 0700 state directory besides."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, 0o600)
    except BaseException:
        sock.close()
        raise
    return sock  # asyncio's create_server() calls listen()


async def read_lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The stream's lines, each cut to MAX_LINE bytes with a note of how much was left out.

    StreamReader's own line reading raises once a line outgrows its 64 KiB buffer, which would
    end the reader with the pipe undrained and the node's exit unrecorded; reading in chunks
    keeps memory bounded whatever the node prints."""
    kept = bytearray()  # the current line, up to MAX_LINE bytes
    length = 0  # the current line's full length
    while chunk := await stream.read(READ_CHUNK):
        *ended, rest = chunk.split(b"\n")
        for part in ended:
            kept += part[: MAX_LINE - len(kept)]
            yield _noted(kept, length + len(part))
            kept.clear()
            length = 0
        kept += rest[: MAX_LINE - len(kept)]
        length += len(rest)
    if length:
        yield _noted(kept, length)


def _noted(kept: bytearray, length: int) -> bytes:
    if length <= len(kept):
        return bytes(kept)
    return bytes(kept) + f" [... {length - len(kept)} more bytes]".encode()


def main() -> int:
    state_dir = private_dir(Path(sys.argv[1]).resolve())
    write_private(state_dir / "supervisor.pid", str(os.getpid()))
    return asyncio.run(Supervisor(state_dir).main())


if __name__ == "__main__":
    raise SystemExit(main())
