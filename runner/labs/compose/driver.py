"""The docker-compose lab's driver. Implements runner.labs.base.LabDriver.

Bring-up, re-apply and tear-down go through the Compose CLI (v2 `docker compose` when present,
else v1 `docker-compose`), as an operator would; everything else through the docker SDK:
container state (exit code and Docker's recorded exit time, restart count), logs with Docker's
timestamps, a streamed Docker event feed (not polling), exec, restart of one container or a whole
group at once. Host-level changes (a stray GPU program, a moved address) run as Ansible playbooks
(runner.labs.compose.hostactions), so the same playbooks work on real nodes over SSH.

Each node is an engine container (the compose service named like the inventory host) and, for
the multi-node group, a host container `<node>-host` that holds the node's addresses, its
node-exporter and its shell; the engine joins the host container's network namespace.

Incarnations: Docker keeps one log per container across restarts; the driver splits it by the
start and exit times it sees on the event feed (each start of a node's engine container is a new
incarnation), so `previous` logs are the last finished incarnation's, like `kubectl logs
--previous`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from runner.errors import LabError, LabNotUp
from runner.fsutil import write_private
from runner.inventory import ComposeSpec, Inventory, Node, Role
from runner.labs import common
from runner.labs.base import (
    Change,
    ChangeKind,
    EventType,
    GpuProcess,
    LabDriver,
    LabEvent,
    LogLine,
    NodeConfig,
    NodeState,
    ProcessState,
    Value,
)
from runner.labs.changes import configured_addresses, ensure_free
from runner.labs.common import utc_time
from runner.labs.compose import hostactions
from runner.labs.compose.build import docker_client
from runner.labs.events import EventFeed, Incarnation
from runner.labs.monitoring import write_prometheus
from runner.scenario import LabKind, NodeStatus

LABEL = "gameday.lab"
_PROJECT = "com.docker.compose.project"
PROBE_PERIOD_S = 10.0  # real-world seconds between readiness probes (kubelet's default)
STOP_TIMEOUT_S = 3
# an exec is a quick look (a pid file, `vllm-lab smi`): longer is a stuck node
EXEC_TIMEOUT_S = 30.0
BACKOFF_FIRST_S = 0.1  # Docker's restart delay starts at 100 ms and doubles
PROMETHEUS_DIR_IN_CONTAINER = "/etc/gameday/prometheus"


def compose_command() -> list[str]:
    """Compose v2 (`docker compose`) when the docker CLI has it, else v1 (`docker-compose`)."""
    docker = shutil.which("docker")
    if docker:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            v2 = subprocess.run(
                [docker, "compose", "version"], capture_output=True, timeout=20, check=False
            )
            if v2.returncode == 0:
                return [docker, "compose"]
    v1 = shutil.which("docker-compose")
    if v1:
        return [v1]
    raise LabError(
        "neither Compose v2 (`docker compose`) nor v1 (`docker-compose`) is installed",
        hint="apt-get install -y docker-compose, or install the Docker Compose plugin",
    )


def _at_or_before(recorded: datetime, event_ts: datetime) -> datetime:
    """The time Docker recorded for a start or an exit, read when its event is handled. On a busy
    machine the container may have restarted (or exited again) by then, and the record is a later
    one's: the event's own time is the bound."""
    return recorded if recorded <= event_ts else event_ts


def _never(ts: str) -> bool:
    return ts.startswith("0001-01-01")


class ComposeLab(LabDriver):
    kind = LabKind.COMPOSE
    label = "compose lab"

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.capabilities = common.host_capabilities(inventory)
        lab = inventory.lab
        self.spec: ComposeSpec = lab.compose or ComposeSpec()
        self.compose_file = (inventory.path.parent / self.spec.file).resolve()
        self.playbooks = (inventory.path.parent / self.spec.playbooks).resolve()
        self._state_dir = common.state_dir(lab)
        self.artifacts_dir: Path | None = None  # where host actions keep their Ansible events
        self._client: Any = None
        self.feed = EventFeed(sync=self._sync)
        self._incs: dict[str, list[Incarnation]] = {}
        self._ready: dict[str, bool] = {}
        # container id -> until when (epoch s) its exits are the lab's own stops. By container and
        # time, not by incarnation number: a restart the event feed has not shown yet when the lab
        # stops the container has no number yet.
        self._stopping: dict[str, float] = {}
        self._docker_events: Any = None
        self._synced = False

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    @property
    def project(self) -> str:
        return self.spec.project

    # ---- Docker and Compose -----------------------------------------------------------------

    @property
    def docker(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    def _compose_env(self) -> dict[str, str]:
        """The compose file's variables, from the inventory (its header lists them)."""
        env = {
            "GAMEDAY_PROJECT": self.project,
            "GAMEDAY_LAB": self.inventory.lab.name,
            "GAMEDAY_IMAGE": self.spec.image,
            "GAMEDAY_TIME_SCALE": f"{self.inventory.lab.time_scale:g}",
            "GAMEDAY_PROMETHEUS_DIR": str(self._state_dir / "prometheus"),
        }
        for role, subnet in self.spec.subnets.items():
            env[f"GAMEDAY_NET_{_var(role)}"] = subnet.rsplit(".", 1)[0]
        for n in self.inventory.nodes:
            if n.published:
                env[f"GAMEDAY_PUBLISH_{_var(n.name)}"] = n.published
        mon = self.inventory.lab.monitoring
        if mon is not None:
            env["GAMEDAY_PUBLISH_PROMETHEUS"] = mon.prometheus_listen
        return os.environ | env

    def compose(self, *args: str, timeout: float = 300) -> str:
        files = ["-f", str(self.compose_file)]
        if self._override_path.exists():
            files += ["-f", str(self._override_path)]
        cmd = [*compose_command(), "-p", self.project, *files, *args]
        try:
            proc = subprocess.run(
                cmd,
                env=self._compose_env(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"`{' '.join(cmd[-len(args) :])}` took over {timeout:.0f} s") from exc
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            lines = [ln for ln in lines if ln.lower().startswith("error")] or lines
            raise LabError(
                f"compose {' '.join(args)} failed: " + (lines[-1] if lines else "(no output)"),
                hint=f"compose file {self.compose_file}; project {self.project}",
            )
        return proc.stdout

    def _labels(self) -> list[str]:
        """The labels every object of this lab carries: the lab's and its Compose project's."""
        return [f"{LABEL}={self.inventory.lab.name}", f"com.docker.compose.project={self.project}"]

    def _containers(self, role: str | None = None, node: str | None = None) -> list[Any]:
        labels = self._labels()
        if role:
            labels.append(f"gameday.role={role}")
        if node:
            labels.append(f"gameday.node={node}")
        return list(self.docker.containers.list(all=True, filters={"label": labels}))

    def _engines(self) -> dict[str, Any]:
        """Each node's engine container (the newest, while Compose replaces one), in one call."""
        out: dict[str, Any] = {}
        for c in self._containers("engine"):
            node = c.labels.get("gameday.node", "")
            if node not in out or c.attrs["Created"] > out[node].attrs["Created"]:
                out[node] = c
        return out

    def engine(self, node: str) -> Any:
        found = self._containers("engine", node)
        if not found:
            raise LabNotUp(
                f"compose lab {self.inventory.lab.name!r} has no container for node {node}",
                hint=f"gameday lab up --lab {self.inventory.path}",
            )
        return max(found, key=lambda c: c.attrs["Created"])

    def host(self, node: str) -> Any:
        """The node's machine: its host container, or the engine container of a one-container
        node."""
        found = self._containers("host", node)
        return found[0] if found else self.engine(node)

    def _exec(self, container: Any, cmd: list[str]) -> tuple[int, str]:
        """Run `cmd` in the container: (exit code, output). LabError when it takes over
        EXEC_TIMEOUT_S: coreutils `timeout` ends the command in the container, and the wait for
        Docker's answer ends a little later whatever Docker does."""
        limit = EXEC_TIMEOUT_S
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["res"] = container.exec_run(
                    ["timeout", "--kill-after=1", f"{limit:g}", *cmd], demux=False
                )
            except BaseException as exc:
                box["exc"] = exc

        worker = threading.Thread(target=run, name="docker-exec", daemon=True)
        began = time.monotonic()
        worker.start()
        worker.join(limit + 5)
        if "exc" in box:
            raise box["exc"]
        res = box.get("res")
        # 124: `timeout` ended it (137 when it had to kill); a 137 before the limit is a kill
        # from elsewhere (the container stopping), and the command's own result
        timed_out = res is not None and res.exit_code in (124, 137)
        if res is None or (timed_out and time.monotonic() - began >= limit):
            raise LabError(
                f"`{' '.join(cmd)}` in container {container.name} did not finish in {limit:g} s",
                hint=f"docker exec -it {container.name} sh  (is the node stuck?)",
            )
        return int(res.exit_code), (res.output or b"").decode(errors="replace")

    # ---- lifecycle --------------------------------------------------------------------------

    def is_up(self) -> bool:
        try:
            engines = self._containers("engine")
        except LabError:
            return False
        return bool(engines) and len(engines) >= len(self.inventory.nodes)

    def preflight(self) -> None:
        """Refuse, before creating anything, a lab that cannot come up."""
        import docker

        self.docker  # noqa: B018 - Docker reachable, or one clear message
        compose_command()
        if not self.compose_file.exists():
            raise LabError(
                f"{self.inventory.path}: compose file {self.compose_file} "
                "(gameday_lab.compose.file) does not exist"
            )
        try:
            self.docker.images.get(self.spec.image)
        except docker.errors.ImageNotFound:
            raise LabError(
                f"the lab image {self.spec.image} is not built",
                hint=f"gameday lab build --lab {self.inventory.path}",
            ) from None
        clash = [
            c.name
            for c in self.docker.containers.list(
                all=True, filters={"label": f"com.docker.compose.project={self.project}"}
            )
            if c.labels.get(LABEL) != self.inventory.lab.name
        ]
        if clash:
            raise LabError(
                f"compose project {self.project!r} already exists and is not this lab's "
                f"(containers {', '.join(sorted(clash)[:4])})",
                hint="set gameday_lab.compose.project to another name, or remove that project",
            )
        self._check_compose_file()

    def _resolved(self) -> dict[str, Any]:
        return dict(yaml.safe_load(self.compose("config")))

    def _check_compose_file(self) -> None:
        """The compose file and the inventory describe the same engines; ports are free."""
        services = self._resolved().get("services", {})
        for n in self.inventory.nodes:
            svc = services.get(n.name)
            if svc is None:
                raise LabError(
                    f"{self.compose_file}: no service {n.name!r} for inventory host {n.name}",
                    hint="inventory hosts are the compose file's engine services",
                )
            want = [*self.inventory.lab.engine_command, *n.rendered_args()]
            if list(svc.get("command") or []) != want:
                raise LabError(
                    f"{self.compose_file}: service {n.name}'s command differs from "
                    f"{self.inventory.path} ({n.name}.gameday_engine_args)",
                    hint=f"compose: {svc.get('command')}; inventory: {want}",
                )
        for svc_name, svc in services.items():
            for port in svc.get("ports") or []:
                host_ip, host_port = _published(port)
                if host_port is None:
                    continue
                ensure_free(host_ip, host_port, f"{self.compose_file}: {svc_name} publishes")

    def up(self) -> None:
        if self.is_up():
            return
        self.preflight()
        self._state_dir.mkdir(parents=True, exist_ok=True)
        self._override_path.unlink(missing_ok=True)
        self._configs_path.unlink(missing_ok=True)
        if self.inventory.lab.monitoring is not None:
            self._write_prometheus("management")
        try:
            self.compose("up", "-d", "--remove-orphans")
            self._sync()
        except BaseException:
            with contextlib.suppress(LabError):
                self.down()  # nothing half-created
            raise

    def down(self) -> None:
        """Remove every container, network and volume of this lab, and nothing else: refused
        (LabError) while the Compose project holds anything that is not this lab's."""
        self._close_feed()
        foreign = self.foreign_objects()
        if foreign:
            raise LabError(
                f"compose project {self.project!r} holds objects that are not lab "
                f"{self.inventory.lab.name!r}'s (no label {LABEL}={self.inventory.lab.name}): "
                + ", ".join(foreign[:6])
                + (f" and {len(foreign) - 6} more" if len(foreign) > 6 else "")
                + "; nothing was removed",
                hint="gameday_lab.compose.project names another project than this lab's: "
                "check the inventory, or remove those objects yourself",
            )
        with contextlib.suppress(LabError):
            self.compose("down", "--volumes", "--remove-orphans", "--timeout", "2")
        # what Compose did not remove (a container it no longer knows): only objects carrying
        # both the lab's label and the project's
        mine = {"label": self._labels()}
        for c in self.docker.containers.list(all=True, filters=mine):
            with contextlib.suppress(Exception):
                c.remove(force=True, v=True)
        for net in self.docker.networks.list(filters=mine):
            with contextlib.suppress(Exception):
                net.remove()
        for vol in self.docker.volumes.list(filters=mine):
            with contextlib.suppress(Exception):
                vol.remove(force=True)
        self._override_path.unlink(missing_ok=True)
        self._configs_path.unlink(missing_ok=True)
        self._generations_path.unlink(missing_ok=True)

    def foreign_objects(self) -> list[str]:
        """What `compose down --volumes --remove-orphans` could remove that this lab did not
        create: the Compose project's objects, and objects named as its networks and volumes,
        that lack the lab's label."""
        import docker

        project = {"label": f"{_PROJECT}={self.project}"}
        net_names = {self._network_name(role) for role in self.spec.networks}
        try:
            containers = self.docker.containers.list(all=True, filters=project)
            # Docker's name filters match parts of names: exact names are picked here
            nets = [
                n
                for n in self.docker.networks.list()
                if n.name in net_names
                or (n.attrs.get("Labels") or {}).get(_PROJECT) == self.project
            ]
            vols = [
                v
                for v in self.docker.volumes.list()
                if v.name.startswith(f"{self.project}_")
                or (v.attrs.get("Labels") or {}).get(_PROJECT) == self.project
            ]
        except docker.errors.DockerException as exc:
            raise LabError(f"Docker: cannot list compose project {self.project!r}: {exc}") from None
        found = (
            [("container", c.name, c.labels or {}) for c in containers]
            + [("network", n.name, n.attrs.get("Labels") or {}) for n in nets]
            + [("volume", v.name, v.attrs.get("Labels") or {}) for v in vols]
        )
        mine = self.inventory.lab.name
        return [
            f"{kind} {name}" + (f" (of lab {lab!r})" if (lab := labels.get(LABEL)) else "")
            for kind, name, labels in found
            if labels.get(LABEL) != mine
        ]

    def leftover_objects(self) -> list[str]:
        """Containers, networks and volumes of this lab that exist now."""
        labels = {"label": [f"{LABEL}={self.inventory.lab.name}"]}
        return (
            [f"container {c.name}" for c in self.docker.containers.list(all=True, filters=labels)]
            + [f"network {n.name}" for n in self.docker.networks.list(filters=labels)]
            + [f"volume {v.name}" for v in self.docker.volumes.list(filters=labels)]
        )

    # ---- the event feed ---------------------------------------------------------------------

    def _sync(self) -> None:
        """Open the Docker event feed, then take each node's current state; start readiness
        probes for running engines (a first probe before returning)."""
        if self._synced:
            return
        self._synced = True
        since = time.time()
        self._docker_events = self.docker.api.events(
            since=since - 1,
            decode=True,
            filters={"type": "container", "label": f"{LABEL}={self.inventory.lab.name}"},
        )
        threading.Thread(target=self._watch, name="docker-events", daemon=True).start()
        for n in self.inventory.nodes:
            with contextlib.suppress(LabNotUp):
                c = self.engine(n.name)
                st = c.attrs["State"]
                if not _never(st["StartedAt"]):
                    inc = self._new_incarnation(n.name, c.id, utc_time(st["StartedAt"]))
                    if not st["Running"] and not _never(st["FinishedAt"]):
                        inc.finished_at = utc_time(st["FinishedAt"])
                        inc.code = int(st["ExitCode"])
                    elif st["Running"]:
                        self._ready[n.name] = self._probe_once(n, c)
                        self._watch_incarnation(n, inc, c)

    def _close_feed(self) -> None:
        if self._docker_events is not None:
            with contextlib.suppress(Exception):
                self._docker_events.close()
            self._docker_events = None
        self._synced = False

    def _node_of(self, attrs: dict[str, str]) -> Node | None:
        if attrs.get("gameday.role") != "engine":
            return None
        name = attrs.get("gameday.node", "")
        try:
            return self.inventory.node(name)
        except KeyError:
            return None

    def _watch(self) -> None:
        feed = self._docker_events
        with contextlib.suppress(Exception):
            for ev in feed:
                action = ev.get("Action") or ev.get("status", "")
                node = self._node_of(ev.get("Actor", {}).get("Attributes", {}))
                if node is None or action not in ("start", "die"):
                    continue
                cid = ev.get("id") or ev["Actor"]["ID"]
                ts = datetime.fromtimestamp(ev["timeNano"] / 1e9, UTC)
                if action == "start":
                    self._on_start(node, cid, ts)
                else:
                    self._on_die(node, cid, ev["Actor"]["Attributes"], ts)

    def _new_incarnation(self, node: str, cid: str, started: datetime) -> Incarnation:
        incs = self._incs.setdefault(node, [])
        inc = Incarnation(len(incs) + 1, cid, started)
        incs.append(inc)
        return inc

    def _current(self, node: str) -> Incarnation | None:
        incs = self._incs.get(node)
        return incs[-1] if incs else None

    def _on_start(self, node: Node, cid: str, ts: datetime) -> None:
        try:
            c = self.docker.containers.get(cid)
            started = _at_or_before(utc_time(c.attrs["State"]["StartedAt"]), ts)
        except Exception:
            return
        cur = self._current(node.name)
        if cur is not None and cur.container_id == cid and started <= cur.started_at:
            return  # seen at sync, or replayed from before it
        inc = self._new_incarnation(node.name, cid, started)
        self._ready[node.name] = False
        self.feed.emit(
            node.name,
            EventType.STARTED,
            started,
            incarnation=inc.number,
            pid=c.attrs["State"].get("Pid"),
            generation=self._generation(node.name),
        )
        self._watch_incarnation(node, inc, c)

    def _on_die(self, node: Node, cid: str, attrs: dict[str, str], ts: datetime) -> None:
        inc = self._current(node.name)
        if inc is None or inc.container_id != cid or inc.finished_at is not None:
            return
        if ts < inc.started_at:
            return  # replayed from before the start the lab knows (the feed opens 1 s early)
        finished, status, restarts = ts, "", 0
        with contextlib.suppress(Exception):
            st = self.docker.containers.get(cid).attrs
            if not _never(st["State"]["FinishedAt"]):
                # Docker's recorded exit time, unless it is already a later exit's
                finished = _at_or_before(utc_time(st["State"]["FinishedAt"]), ts)
            status = st["State"]["Status"]
            restarts = int(st.get("RestartCount", 0))
        inc.finished_at = finished
        inc.code = int(attrs.get("exitCode", "0"))
        inc.stopped = ts.timestamp() <= self._stopping.get(cid, -math.inf)
        self._ready[node.name] = False
        self.feed.emit(node.name, EventType.EXITED, finished, **inc.exited())
        if status == "restarting":
            self.feed.emit(
                node.name,
                EventType.BACKOFF,
                finished,
                delay_s=BACKOFF_FIRST_S * 2 ** max(restarts - 1, 0),
                restarts=restarts,
            )

    def _watch_incarnation(self, node: Node, inc: Incarnation, container: Any) -> None:
        threading.Thread(
            target=self._follow_first_output, args=(node, inc, container), daemon=True
        ).start()
        if node.role is not Role.WORKER:
            threading.Thread(target=self._probe_loop, args=(node, inc), daemon=True).start()

    def _follow_first_output(self, node: Node, inc: Incarnation, container: Any) -> None:
        """Follow the incarnation's log until its first line (a headless worker is ready then)."""
        with contextlib.suppress(Exception):
            stream = container.logs(
                stream=True, follow=True, timestamps=True, since=int(inc.started_at.timestamp())
            )
            try:
                for raw in stream:
                    ts_text, _, _ = raw.decode(errors="replace").partition(" ")
                    ts = utc_time(ts_text)
                    if ts < inc.started_at:
                        continue
                    inc.first_output_at = ts
                    self.feed.emit(node.name, EventType.FIRST_OUTPUT, ts, incarnation=inc.number)
                    if node.role is Role.WORKER and inc.finished_at is None:
                        self._ready[node.name] = True
                        self.feed.emit(node.name, EventType.READY, ts, incarnation=inc.number)
                    return
            finally:
                with contextlib.suppress(Exception):
                    stream.close()

    def _probe_loop(self, node: Node, inc: Incarnation) -> None:
        period = max(PROBE_PERIOD_S / self.inventory.lab.time_scale, 0.02)
        with httpx.Client(timeout=max(period, 0.5)) as http:
            while inc.finished_at is None and self._synced:
                try:
                    ok = http.get(node.url + "/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                cur = self._current(node.name)
                if cur is not inc or inc.finished_at is not None:
                    return
                if ok != self._ready.get(node.name, False):
                    self._ready[node.name] = ok
                    ev = EventType.READY if ok else EventType.UNREADY
                    self.feed.emit(node.name, ev, datetime.now(UTC), incarnation=inc.number)
                time.sleep(period)

    def _probe_once(self, node: Node, container: Any) -> bool:
        if node.role is Role.WORKER:
            return bool(container.logs(tail=1))
        try:
            return httpx.get(node.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    # ---- observation ------------------------------------------------------------------------

    def states(self) -> dict[str, NodeState]:
        self._sync()
        engines = self._engines()
        generations = self._generations()
        return {
            n.name: self._state(n, engines.get(n.name), generations.get(n.name, 1))
            for n in self.inventory.nodes
        }

    def _state(self, n: Node, c: Any, generation: int) -> NodeState:
        if c is None:
            return common.pending(n.name, 0, "no container")
        st = c.attrs["State"]
        status = {
            "running": NodeStatus.RUNNING,
            "paused": NodeStatus.RUNNING,
            "restarting": NodeStatus.CRASH_LOOPING,
            "exited": NodeStatus.EXITED,
            "dead": NodeStatus.EXITED,
        }.get(st["Status"], NodeStatus.PENDING)
        incs = self._incs.get(n.name, [])
        reason = {
            NodeStatus.CRASH_LOOPING: "CrashLoopBackOff",
            NodeStatus.EXITED: "Completed" if st.get("ExitCode") == 0 else "Error",
        }.get(status, "")
        return common.node_state(
            n.name,
            status,
            generation=generation,
            restarts=int(c.attrs.get("RestartCount", 0)),
            ready=self._ready.get(n.name, False),
            reason=reason,
            current=incs[-1] if incs else None,
            incarnations=incs,
            pid=st.get("Pid") or None,
        )

    def _container_lines(self, cid: str) -> Iterator[LogLine]:
        import docker

        try:
            raw = self.docker.containers.get(cid).logs(timestamps=True)
        except docker.errors.NotFound:
            return
        yield from common.stamped_lines(raw.decode(errors="replace"))

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        self._sync()
        incs = self._incs.get(node, [])
        if not 1 <= incarnation <= len(incs):
            return []
        inc = incs[incarnation - 1]
        prev = incs[incarnation - 2] if incarnation > 1 else None
        nxt = incs[incarnation] if incarnation < len(incs) else None
        # A container's log spans all of its restarts: an incarnation's lines lie between the
        # previous incarnation's exit and the next one's start in the same container. The first
        # incarnation of a container owns everything before its next start.
        start: datetime | None = None
        if prev is not None and prev.container_id == inc.container_id:
            start = prev.finished_at or inc.started_at
        end = nxt.started_at if nxt is not None and nxt.container_id == inc.container_id else None
        return [
            ln
            for ln in self._container_lines(inc.container_id)
            if (start is None or ln.ts > start) and (end is None or ln.ts < end)
        ]

    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]:
        self._sync()
        seen: list[str] = []
        out: list[LogLine] = []
        for inc in self._incs.get(node, []):
            if inc.container_id not in seen:
                seen.append(inc.container_id)
                out += [
                    ln
                    for ln in self._container_lines(inc.container_id)
                    if since is None or ln.ts >= since
                ]
        return sorted(out, key=lambda ln: ln.ts)

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        return self.feed.wait_events(since, timeout)

    def last_event_seq(self) -> int:
        return self.feed.last_event_seq()

    def url(self, node: str) -> str:
        return self.inventory.node(node).url

    # ---- node configs: re-applied through Compose (an override file) ------------------------

    @property
    def _override_path(self) -> Path:
        return self._state_dir / "compose.override.yaml"

    @property
    def _configs_path(self) -> Path:
        return self._state_dir / "configs.json"

    @property
    def _generations_path(self) -> Path:
        return self._state_dir / "generations.json"

    def _generations(self) -> dict[str, int]:
        """Each node's generation (1 until the lab re-applies or restarts it)."""
        if not self._generations_path.exists():
            return {}
        return {k: int(v) for k, v in json.loads(self._generations_path.read_text()).items()}

    def _generation(self, node: str) -> int:
        return self._generations().get(node, 1)

    def _bump_generation(self, nodes: Sequence[str]) -> None:
        gens = self._generations()
        for n in nodes:
            gens[n] = int(gens.get(n, 1)) + 1
        write_private(self._generations_path, json.dumps(gens))

    @functools.cached_property
    def _image_env(self) -> dict[str, str]:
        env = self.docker.images.get(self.spec.image).attrs["Config"].get("Env") or []
        return dict(e.split("=", 1) for e in env)

    def config(self, node: str) -> NodeConfig:
        """The engine container's actual command and environment (the lab's own GAMEDAY_*
        variables and the image's defaults left out)."""
        c = self.engine(node)
        cmd = list(c.attrs["Config"]["Cmd"] or [])
        prefix = list(self.inventory.lab.engine_command)
        args = cmd[len(prefix) :] if cmd[: len(prefix)] == prefix else cmd
        image_env = self._image_env
        env = {}
        for item in c.attrs["Config"].get("Env") or []:
            k, _, v = item.partition("=")
            if k.startswith("GAMEDAY_") or image_env.get(k) == v:
                continue
            env[k] = v
        return NodeConfig(args=tuple(args), env=env)

    def _write_override(self, configs: dict[str, NodeConfig]) -> None:
        if not configs:
            self._override_path.unlink(missing_ok=True)
            return
        services = {}
        for node, cfg in configs.items():
            base = self.baseline_config(node)
            missing = sorted(set(base.env) - set(cfg.env))
            if missing:
                raise LabError(
                    f"the compose lab cannot unset {node}'s baseline variables {missing} "
                    "(Compose merges environments)"
                )
            services[node] = {
                "command": [*self.inventory.lab.engine_command, *cfg.args],
                "environment": dict(cfg.env),
            }
        doc = {"version": "2.4", "services": services}
        write_private(  # it holds the nodes' environments: owner-only
            self._override_path,
            "# written by gameday: the nodes whose config a scenario changed\n"
            + yaml.safe_dump(doc, sort_keys=False),
        )

    def _reapply(self, node: str, cfg: NodeConfig) -> None:
        configs = {
            k: NodeConfig.model_validate(v)
            for k, v in (
                json.loads(self._configs_path.read_text()) if self._configs_path.exists() else {}
            ).items()
        }
        if cfg == self.baseline_config(node):
            configs.pop(node, None)
        else:
            configs[node] = cfg
        self._write_override(configs)
        write_private(
            self._configs_path,
            json.dumps({k: v.model_dump(mode="json") for k, v in configs.items()}),
        )
        self._bump_generation([node])
        # stop the old container first (a stop also ends its restart policy), so that it cannot
        # crash-loop on the old config while Compose replaces it; it is replaced, so every exit
        # of it from now on is the lab's doing
        old: Any = None
        with contextlib.suppress(LabNotUp):
            old = self.engine(node)
        try:
            if old is not None:
                self._stopping[old.id] = math.inf
                old.stop(timeout=STOP_TIMEOUT_S)
            self.compose("up", "-d", "--no-deps", "--force-recreate", node)
        except BaseException:
            if old is not None:  # not replaced after all: its later exits are its own
                self._stopping[old.id] = time.time()
            raise

    # ---- changes ----------------------------------------------------------------------------

    def current(self, change: Change) -> NodeConfig | ProcessState | Value:
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        if change.kind is ChangeKind.PROCESS:
            return self._process(change.node, change.subject)
        if change.kind is ChangeKind.ADDRESS:
            # "": not on that network (an address move interrupted between its two steps)
            return Value(value=self._addresses().get(change.node, {}).get(change.subject, ""))
        return Value(value=self._scrape_network())

    def _scrape_network(self) -> str:
        f = self._state_dir / "prometheus" / "scrape_network"
        return f.read_text() if f.exists() else "management"

    def _process(self, node: str, name: str) -> ProcessState:
        host = self.host(node)
        pidfile = f"{hostactions.RUN_DIR}/{name}.pid"
        rc, _ = self._exec(host, ["start-stop-daemon", "--status", "--pidfile", pidfile])
        rc_cmd, out = self._exec(host, ["cat", f"{hostactions.RUN_DIR}/{name}.cmd"])
        command: tuple[str, ...] = ()
        if rc_cmd == 0:
            with contextlib.suppress(ValueError):
                command = tuple(json.loads(out))
        return ProcessState(running=rc == 0, command=command)

    def apply(self, change: Change) -> None:
        after = change.after
        if change.kind is ChangeKind.NODE_CONFIG and isinstance(after, NodeConfig):
            self._reapply(change.node, after)
        elif change.kind is ChangeKind.PROCESS and isinstance(after, ProcessState):
            self._host_action(
                "process.yaml",
                change.node,
                {
                    "gameday_process": change.subject,
                    "gameday_state": "started" if after.running else "stopped",
                    "gameday_command": list(after.command),
                },
            )
        elif change.kind is ChangeKind.ADDRESS and isinstance(after, Value):
            self._host_action(
                "change-address.yaml",
                change.node,
                {
                    "gameday_network": self._network_name(change.subject),
                    "gameday_new_address": after.value,
                },
            )
        elif change.kind is ChangeKind.SCRAPE_TARGETS and isinstance(after, Value):
            common.apply_scrape_targets(
                self.inventory, self._pdir, self._write_prometheus, after.value, self._prom_hint
            )
        else:
            raise LabError(f"the compose lab cannot apply a {change.kind.value} change")

    def _host_action(self, playbook: str, node: str, extravars: dict[str, Any]) -> None:
        out = self.artifacts_dir or (self._state_dir / "ansible")
        hostactions.run_playbook(
            self.inventory.path,
            self.playbooks / playbook,
            node,
            {"gameday_node": node, **extravars},
            out,
            self.inventory.lab.name,
        )

    def settle(self) -> None:
        """Before undoing: wait for host actions an interrupted run left running."""
        left = hostactions.wait_in_flight(self.inventory.lab.name, 60)
        if left:
            raise LabError(
                f"host actions of an earlier run are still running after 60 s (pids {left})",
                hint="wait for them, or stop them, then run gameday cleanup again",
            )

    def _network_name(self, role: str) -> str:
        key = self.spec.networks.get(role)
        if key is None:
            raise LabError(f"the compose lab has no {role} network (gameday_lab.compose.networks)")
        return f"{self.project}-{key}"

    def _addresses(self) -> dict[str, dict[str, str]]:
        """Each node's current address on each network, as Docker has it."""
        out: dict[str, dict[str, str]] = {}
        for n in self.inventory.nodes:
            try:
                nets = self.host(n.name).attrs["NetworkSettings"]["Networks"] or {}
            except LabNotUp:
                continue
            for role in self.spec.networks:
                if n.network_address(role) is None:
                    continue  # an address the inventory does not manage
                info = nets.get(self._network_name(role))
                if info and info.get("IPAddress"):
                    out.setdefault(n.name, {})[role] = info["IPAddress"]
        return out

    def _write_prometheus(self, network: str) -> None:
        write_prometheus(
            self._state_dir / "prometheus",
            self.inventory,
            network,
            configured_addresses(self.inventory),
            # an engine on the overlay network is scraped there, else by its service name
            vllm_hosts={n.name: n.overlay_address or n.name for n in self.inventory.nodes},
            rules_path=f"{PROMETHEUS_DIR_IN_CONTAINER}/rules.yml",
        )

    def signal(self, node: str, process: str, signal: str) -> None:
        c = self.engine(node)
        if process == "engine_core":
            # the engine is the container's PID 1; its engine core is its child
            rc, out = self._exec(c, ["pkill", "--signal", signal, "--parent", "1"])
            if rc != 0:
                raise LabError(f"{node}: no engine-core process to signal ({out.strip()})")
        else:
            c.kill(signal=f"SIG{signal}")

    @property
    def _pdir(self) -> Path:
        return self._state_dir / "prometheus"

    @property
    def _prom_hint(self) -> str:
        return f"docker logs {self.project}-prometheus"

    def monitoring_ready(self, timeout_s: float) -> None:
        common.monitoring_ready(self.inventory, self._pdir, timeout_s, self._prom_hint)

    def applied_via(self, kind: ChangeKind) -> str:
        playbook = {ChangeKind.PROCESS: "process", ChangeKind.ADDRESS: "change-address"}
        return f"Ansible: playbooks/{playbook[kind]}.yaml" if kind in playbook else ""

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        rc, out = self._exec(self.host(node), ["vllm-lab", "smi", "--json"])
        if rc != 0:
            raise LabError(f"{node}: `vllm-lab smi` failed: {out.strip()[:200]}")
        return common.gpu_processes_of(out)

    def restart(self, nodes: Sequence[str]) -> None:
        """Restart the nodes' engine containers together: all stopped, then all started (a
        worker that stops fast and comes back while its head is still shutting down would join
        the old head and never the new one)."""
        self._sync()
        containers = [self.engine(n) for n in nodes]
        self._bump_generation(nodes)
        errors: list[BaseException] = []

        def each(step: Callable[[Any], None]) -> None:
            def one(c: Any) -> None:
                try:
                    step(c)
                except Exception as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=one, args=(c,)) for c in containers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise LabError(f"docker could not restart {', '.join(nodes)}: {errors[0]}")

        for c in containers:
            self._stopping[c.id] = math.inf
        try:
            each(lambda c: c.stop(timeout=STOP_TIMEOUT_S))
        finally:
            # the stops are over, done or not: later exits are the nodes' own
            stopped_by = time.time()
            for c in containers:
                self._stopping[c.id] = stopped_by
        each(lambda c: c.start())

    def leftovers(self) -> list[str]:
        """Everything that differs from the lab's baseline (empty when clean)."""
        strays = []
        for n in self.inventory.nodes:
            rc, out = self._exec(self.host(n.name), ["ls", hostactions.RUN_DIR])
            for f in out.split() if rc == 0 else []:
                if f.endswith(".pid") and self._process(n.name, f[:-4]).running:
                    strays.append(f"{n.name}: process {f[:-4]} the lab did not start")
        moved = common.moved_addresses(configured_addresses(self.inventory), self._addresses())
        scrape = common.scrape_drift(self.inventory, self._scrape_network())
        return common.leftovers(self, [*strays, *moved, *scrape])


def _var(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _published(port: Any) -> tuple[str, int | None]:
    """(host ip, host port) of a compose `ports` entry in either syntax."""
    if isinstance(port, dict):
        published = port.get("published")
        return str(port.get("host_ip") or "0.0.0.0"), int(published) if published else None
    parts = str(port).split(":")
    if len(parts) == 3:
        return parts[0], int(parts[1])
    if len(parts) == 2:
        return "0.0.0.0", int(parts[0])
    return "0.0.0.0", None
