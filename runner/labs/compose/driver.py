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

The driver holds one object per job: `project` (the Compose CLI, timed exec, the project's
objects), `watch.DockerWatch` (the event feed, incarnations, readiness), `configs.ConfigFiles`
(override file, node configs, generations) and `hosts.NodeHosts` (the nodes' machines and the
playbooks that change them).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import yaml

from runner.errors import LabError, LabNotUp
from runner.labs.base import (
    Change,
    ChangeKind,
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
from runner.labs.common.alertmanager_config import webhook_url, write_alertmanager
from runner.labs.common.network import configured_addresses
from runner.labs.common.prometheus_config import write_prometheus
from runner.labs.compose import hostactions, project
from runner.labs.compose.build import check_current, docker_client
from runner.labs.compose.configs import ConfigFiles, config_of, receiver_listen
from runner.labs.compose.hosts import NodeHosts
from runner.labs.compose.project import LABEL, compose_command, compose_file
from runner.labs.compose.watch import DockerWatch
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import ComposeSpec, Inventory
from runner.spec.kinds import LabKind
from vllmfacts import xid

STOP_TIMEOUT_S = 3
# the monitoring's containers by their gameday.role, as a report names them
_PARTS = {"prometheus": "Prometheus", "alertmanager": "Alertmanager", "host": "node-exporter"}
LOG_TAIL = 50  # lines of a dead monitoring container's log read for its last lines
PROMETHEUS_DIR_IN_CONTAINER = "/etc/gameday/prometheus"
GPU_STATE_IN_CONTAINER = "/var/lib/gameday/gpu"  # GAMEDAY_GPU_STATE of compose.yaml's nodes


class ComposeLab(LabDriver):
    kind = LabKind.COMPOSE
    label = "compose lab"

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.capabilities = common.host_capabilities(inventory)
        lab = inventory.lab
        self.spec: ComposeSpec = lab.compose or ComposeSpec()
        self.compose_file = compose_file(inventory, self.spec)
        self._state_dir = common.state_dir(lab)
        self.artifacts_dir: Path | None = None  # where host actions keep their Ansible events
        self._client: Any = None
        self.files = ConfigFiles(self._state_dir)
        self.hosts = NodeHosts(inventory, self.spec, self.host)
        self.watch = DockerWatch(
            inventory,
            docker=lambda: self.docker,
            engine=self.engine,
            generation=self.files.generation,
        )
        self.feed = self.watch.feed

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

    def compose(self, *args: str, timeout: float = 300) -> str:
        files = [self.compose_file]
        if self.files.override_path.exists():
            files.append(self.files.override_path)
        env = project.compose_env(self.inventory, self.spec, self._state_dir)
        return project.run_compose(files, self.project, args, env, timeout)

    def _labels(self) -> list[str]:
        """The labels every object of this lab carries: the lab's and its Compose project's."""
        return [f"{LABEL}={self.inventory.lab.name}", f"{project.PROJECT_LABEL}={self.project}"]

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
        return project.exec_in(container, cmd)

    # ---- lifecycle --------------------------------------------------------------------------

    def is_up(self) -> bool:
        try:
            engines = self._containers("engine")
        except LabError:
            return False
        return bool(engines) and len(engines) >= len(self.inventory.nodes)

    def preflight(self) -> None:
        """Refuse, before creating anything, a lab that cannot come up."""
        self.docker  # noqa: B018 - Docker reachable, or one clear message
        compose_command()
        if not self.compose_file.exists():
            raise LabError(
                f"{self.inventory.path}: compose file {self.compose_file} "
                "(gameday_lab.compose.file) does not exist"
            )
        project.check_project(self.docker, self.spec, self.inventory)
        check_current(self.docker, self.spec, self.inventory.path)
        self._check_compose_file()

    def _resolved(self) -> dict[str, Any]:
        return dict(yaml.safe_load(self.compose("config")))

    def _check_compose_file(self) -> None:
        """The compose file and the inventory describe the same engines; ports are free."""
        services = self._resolved().get("services", {})
        project.check_services(self.inventory, self.compose_file, services)

    def up(self) -> None:
        if self.is_up():
            return
        self.preflight()
        self._state_dir.mkdir(parents=True, exist_ok=True)
        self.files.clear()
        if self.inventory.lab.monitoring is not None:
            self._write_prometheus("management")
        try:
            self.compose("up", "-d", "--remove-orphans")
            self.watch.sync()
        except BaseException:
            with contextlib.suppress(LabError):
                self.down()  # nothing half-created
            raise

    def down(self) -> None:
        """Remove every container, network and volume of this lab, and nothing else: refused
        (LabError) while the Compose project holds anything that is not this lab's."""
        self.watch.close()
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
        project.remove_labelled(self.docker, self._labels())
        self.files.remove()

    def foreign_objects(self) -> list[str]:
        """What `compose down --volumes --remove-orphans` could remove that this lab did not
        create: the Compose project's objects, and objects named as its networks and volumes,
        that lack the lab's label."""
        net_names = {self.hosts.network_name(role) for role in self.spec.networks}
        return project.foreign_objects(
            self.docker, self.project, net_names, self.inventory.lab.name
        )

    def leftover_objects(self) -> list[str]:
        """Containers, networks and volumes of this lab that exist now."""
        return project.labelled_objects(self.docker, f"{LABEL}={self.inventory.lab.name}")

    # ---- observation ------------------------------------------------------------------------

    def states(self) -> dict[str, NodeState]:
        self.watch.sync()
        engines = self._engines()
        generations = self.files.generations()
        return {
            n.name: self.watch.state_of(n, engines.get(n.name), generations.get(n.name, 1))
            for n in self.inventory.nodes
        }

    def _container_lines(self, cid: str) -> Iterator[LogLine]:
        import docker

        try:
            raw = self.docker.containers.get(cid).logs(timestamps=True)
        except docker.errors.NotFound:
            return
        yield from common.stamped_lines(raw.decode(errors="replace"))

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        self.watch.sync()
        incs = self.watch.incs.get(node, [])
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
        self.watch.sync()
        seen: list[str] = []
        out: list[LogLine] = []
        for inc in self.watch.incs.get(node, []):
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

    def events_behind(self, node: str) -> bool:
        # states() reads Docker now; the events come through the daemon's event stream, which a
        # busy daemon (another project's networks being created) delivers seconds late
        self.watch.sync()
        return self.watch.behind(node, self._engines().get(node))

    def last_event_seq(self) -> int:
        return self.feed.last_event_seq()

    def url(self, node: str) -> str:
        return self.inventory.node(node).url

    def facts(self) -> dict[str, str]:
        return {**super().facts(), "GAMEDAY_COMPOSE_PROJECT": self.project}

    # ---- node configs: re-applied through Compose (an override file) ------------------------

    @functools.cached_property
    def _image_env(self) -> dict[str, str]:
        env = self.docker.images.get(self.spec.image).attrs["Config"].get("Env") or []
        return dict(e.split("=", 1) for e in env)

    def config(self, node: str) -> NodeConfig:
        """The engine container's actual command and environment (the lab's own GAMEDAY_*
        variables and the image's defaults left out)."""
        c = self.engine(node)
        return config_of(c, self._program(node), self._image_env)

    def _program(self, node: str) -> tuple[str, ...]:
        return self.inventory.node(node).program(self.inventory.lab.engine_command)

    def _reapply(self, node: str, cfg: NodeConfig) -> None:
        configs = self.files.configs()
        if cfg == self.baseline_config(node):
            configs.pop(node, None)
        else:
            configs[node] = cfg
        self.files.save(configs, self._program, self.baseline_config)
        self.files.bump_generation([node])
        # stop the old container first (a stop also ends its restart policy), so that it cannot
        # crash-loop on the old config while Compose replaces it; it is replaced, so every exit
        # of it from now on is the lab's doing
        old: Any = None
        with contextlib.suppress(LabNotUp):
            old = self.engine(node)
        try:
            if old is not None:
                self.watch.stopping[old.id] = math.inf
                old.stop(timeout=STOP_TIMEOUT_S)
            self.compose("up", "-d", "--no-deps", "--force-recreate", node)
        except BaseException:
            if old is not None:  # not replaced after all: its later exits are its own
                self.watch.stopping[old.id] = time.time()
            raise

    # ---- changes ----------------------------------------------------------------------------

    def current(self, change: Change) -> NodeConfig | ProcessState | Value:
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        if change.kind is ChangeKind.PROCESS:
            return self.hosts.process(change.node, change.subject)
        if change.kind is ChangeKind.ADDRESS:
            # "": not on that network (an address move interrupted between its two steps)
            return Value(value=self.hosts.addresses().get(change.node, {}).get(change.subject, ""))
        return Value(value=self._scrape_network())

    def _scrape_network(self) -> str:
        f = self._state_dir / "prometheus" / "scrape_network"
        return f.read_text() if f.exists() else "management"

    def apply(self, change: Change) -> None:
        after = change.after
        if change.kind is ChangeKind.NODE_CONFIG and isinstance(after, NodeConfig):
            self._reapply(change.node, after)
        elif change.kind is ChangeKind.PROCESS and isinstance(after, ProcessState):
            self.hosts.set_process(change.node, change.subject, after, self._ansible_dir)
        elif change.kind is ChangeKind.ADDRESS and isinstance(after, Value):
            self.hosts.set_address(change.node, change.subject, after.value, self._ansible_dir)
        elif change.kind is ChangeKind.SCRAPE_TARGETS and isinstance(after, Value):
            common.apply_scrape_targets(self.inventory, self._write_prometheus, after.value)
        else:
            raise LabError(f"the compose lab cannot apply a {change.kind.value} change")

    @property
    def _ansible_dir(self) -> Path:
        """Where host actions keep their Ansible events."""
        return self.artifacts_dir or (self._state_dir / "ansible")

    def settle(self) -> None:
        """Before undoing: wait for host actions an interrupted run left running."""
        left = hostactions.wait_in_flight(self.inventory.lab.name, 60)
        if left:
            raise LabError(
                f"host actions of an earlier run are still running after 60 s (pids {left})",
                hint="wait for them, or stop them, then run gameday cleanup again",
            )

    def _write_prometheus(self, network: str) -> None:
        write_prometheus(
            self._state_dir / "prometheus",
            self.inventory,
            network,
            configured_addresses(self.inventory),
            # an engine on the overlay network is scraped there, else by its service name
            vllm_hosts={n.name: n.overlay_address or n.name for n in self.inventory.nodes},
            rules_path=f"{PROMETHEUS_DIR_IN_CONTAINER}/rules.yml",
            alertmanager=f"{self._alertmanager_address()}:9093",
        )
        write_alertmanager(
            self._state_dir / "alertmanager",
            self.inventory,
            webhook_url(receiver_listen(self.inventory)),
        )

    def _alertmanager_address(self) -> str:
        """The Alertmanager container's address on the management network (compose.yaml: .3)."""
        spec = self.inventory.lab.compose or ComposeSpec()
        return str(IPv4Network(spec.subnets["management"]).network_address + 3)

    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        c = self.engine(node)
        if process is EngineProcess.ENGINE_CORE:
            # the engine is the container's PID 1; its engine core is its child
            rc, out = self._exec(c, ["pkill", "--signal", signal.value, "--parent", "1"])
            if rc != 0:
                raise LabError(f"{node}: no engine-core process to signal ({out.strip()})")
        else:
            self.watch.signalled.add(c.id)
            c.kill(signal=f"SIG{signal.value}")

    @property
    def _pdir(self) -> Path:
        return self._state_dir / "prometheus"

    @property
    def _prom_hint(self) -> str:
        return f"docker logs {self.project}-prometheus"

    def monitoring_ready(self, timeout_s: float) -> None:
        common.monitoring_ready(
            self.inventory, self._pdir, timeout_s, self._prom_hint, self.dead_part
        )

    def dead_part(self) -> PartDeath | None:
        """The first of the lab's monitoring containers (Prometheus, Alertmanager, a node's
        host container, whose command is its node-exporter) that Docker has restarted, or that
        exited or is restarting, with the last lines of its log."""
        if self.inventory.lab.monitoring is None:
            return None
        import docker

        for role, what in _PARTS.items():
            for c in self._containers(role):
                st = c.attrs.get("State") or {}
                restarts = int(c.attrs.get("RestartCount") or 0)
                status = str(st.get("Status", ""))
                if not restarts and status not in ("exited", "dead", "restarting"):
                    continue
                try:
                    tail = c.logs(tail=LOG_TAIL).decode(errors="replace")
                except docker.errors.DockerException as exc:
                    tail = f"(its log cannot be read: {exc})"
                node = c.labels.get("gameday.node")
                return PartDeath(
                    part=what + (f" of node {node}" if node else "") + f" (container {c.name})",
                    # Docker clears a container's exit code when it starts it again
                    exit_code=st.get("ExitCode") if status != "running" else None,
                    reason=status if status != "running" else "",
                    restarts=restarts,
                    last_lines=last_lines(tail),
                    log=f"docker logs {c.name}",
                )
        return None

    def applied_via(self, kind: ChangeKind) -> str:
        playbook = {ChangeKind.PROCESS: "process", ChangeKind.ADDRESS: "change-address"}
        return f"Ansible: playbooks/{playbook[kind]}.yaml" if kind in playbook else ""

    def xid_broke_at(self, node: str) -> datetime | None:
        rc, out = self._exec(self.host(node), ["cat", f"{GPU_STATE_IN_CONTAINER}/{xid.FAULT_FILE}"])
        at = xid.broke_at(out) if rc == 0 else None
        return None if at is None else datetime.fromtimestamp(at, UTC)

    def reboot_kernel_log(self, node: str) -> None:
        # the image's own interpreter runs the same code as the local lab's reboot
        state = repr(GPU_STATE_IN_CONTAINER)
        boot = f"import pathlib, vllmfacts.xid as x; x.boot(pathlib.Path({state}))"
        rc, out = self._exec(self.host(node), ["python3", "-c", boot])
        if rc != 0:
            raise LabError(f"{node}: the kernel log's reboot failed: {out.strip()[-200:]}")

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        rc, out = self._exec(self.host(node), ["vllm-lab", "smi", "--json"])
        if rc != 0:
            raise LabError(f"{node}: `vllm-lab smi` failed: {out.strip()[:200]}")
        return common.gpu_processes_of(out)

    def restart(self, nodes: Sequence[str]) -> None:
        """Restart the nodes' engine containers together: all stopped, then all started (a
        worker that stops fast and comes back while its head is still shutting down would join
        the old head and never the new one)."""
        self.watch.sync()
        containers = [self.engine(n) for n in nodes]
        self.files.bump_generation(nodes)
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
            self.watch.stopping[c.id] = math.inf
        try:
            each(lambda c: c.stop(timeout=STOP_TIMEOUT_S))
        finally:
            # the stops are over, done or not: later exits are the nodes' own
            stopped_by = time.time()
            for c in containers:
                self.watch.stopping[c.id] = stopped_by
        each(lambda c: c.start())

    def stop(self, node: str) -> None:
        """`docker stop` of the node's engine container: a stopped container stays stopped
        whatever its restart policy, until it is started."""
        self.watch.sync()
        c = self.engine(node)
        self.watch.stopping[c.id] = math.inf
        try:
            c.stop(timeout=STOP_TIMEOUT_S)
        except Exception as exc:
            raise LabError(f"docker could not stop {node}: {exc}") from exc
        finally:
            self.watch.stopping[c.id] = time.time()

    def start(self, node: str) -> None:
        """`docker start` of the node's engine container, in a new generation (a running
        container is left as it is)."""
        self.watch.sync()
        c = self.engine(node)
        c.reload()
        if c.status == "running":
            return
        self.files.bump_generation([node])
        try:
            c.start()
        except Exception as exc:
            raise LabError(f"docker could not start {node}: {exc}") from exc

    def leftovers(self) -> list[str]:
        """Everything that differs from the lab's baseline (empty when clean)."""
        strays = self.hosts.strays()
        moved = common.moved_addresses(configured_addresses(self.inventory), self.hosts.addresses())
        scrape = common.scrape_drift(self.inventory, self._scrape_network())
        return common.leftovers(self, [*strays, *moved, *scrape])
