"""An in-process lab for testing the runner: nodes are records, not processes, and what a node
does when it starts is scripted, in the spirit of httpx's `MockTransport`.

A `Script` says what a node does when it starts with a given configuration: serve, exit (with
its log lines, exit code and how long it ran, in lab seconds), or hang. Applying a change or
restarting a node starts it again, so a test scripts a fault by the configuration it injects
and the recovery by the one it restores. Events and logs carry stamps on the lab's clock as
the script gives them; the lab answers HTTP (health, inference, completions that follow from the
served model and the prompt, Prometheus's alerts) through `transport`, so probes run unchanged and
nothing leaves the process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from runner.labs.base import (
    AnyState,
    Capability,
    Change,
    ChangeKind,
    EventType,
    ExitInfo,
    GpuProcess,
    LabDriver,
    LabEvent,
    LogLine,
    NodeConfig,
    NodeState,
    ProcessState,
    Value,
)
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import Inventory
from runner.spec.kinds import NodeStatus, RestartPolicy


@dataclass(frozen=True)
class Serves:
    """The node starts, logs, and serves."""

    logs: tuple[str, ...] = ("INFO:     Application startup complete.",)


@dataclass(frozen=True)
class Exits:
    """The node starts, logs, and exits after `after_s` lab seconds; its restart policy then
    restarts it `restarts` times, each run ending alike (a crash loop)."""

    code: int
    logs: tuple[str, ...]
    after_s: float = 0.01
    restarts: int = 0


@dataclass(frozen=True)
class Hangs:
    """The node starts and logs, and never serves."""

    logs: tuple[str, ...] = ()


Outcome = Serves | Exits | Hangs
Script = Callable[[str, NodeConfig], Outcome]
FIRST_OUTPUT_S = 0.001  # lab seconds from a start to the first log line


def serves(_node: str, _config: NodeConfig) -> Outcome:
    return Serves()


@dataclass
class _Node:
    config: NodeConfig
    incarnation: int = 0
    generation: int = 0
    restarts: int = 0
    status: NodeStatus = NodeStatus.PENDING
    ready: bool = False
    started_at: datetime | None = None
    first_output_at: datetime | None = None
    last_exit: ExitInfo | None = None
    logs: dict[int, list[LogLine]] = field(default_factory=dict)


class FakeLab(LabDriver):
    label = "fake lab"

    def __init__(
        self,
        inventory: Inventory,
        script: Script = serves,
        *,
        capabilities: frozenset[Capability] = frozenset(Capability),
        state_dir: Path,
        alerts: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        self.inventory = inventory
        self.kind = inventory.lab.kind
        self.capabilities = capabilities
        self.script = script
        self.alerts = alerts  # what Prometheus's /api/v1/alerts answers, asked each time
        self.start_cost_s = 0.0  # nothing to start: no interpreter, no imports
        self.restart_slack_s = 0.0  # a scripted restart policy acts at once
        self._state_dir = state_dir
        self._cond = threading.Condition()
        self._events: list[LabEvent] = []
        self._nodes: dict[str, _Node] = {}
        self._values: dict[tuple[str, str, str], AnyState] = {}
        self._xid_broke: dict[str, datetime] = {}  # when a GPU XID program broke a node's GPU
        self.applied: list[Change] = []  # every change applied, in order (undos included)
        self.restarted: list[list[str]] = []  # every restart, in order
        # tests interrupt a run here: called with the name of each lab call as it is made
        self.on_call: Callable[[str], None] = lambda _name: None

    # ---- lifecycle ----
    @property
    def state_dir(self) -> Path:
        return self._state_dir

    def is_up(self) -> bool:
        return bool(self._nodes)

    def up(self) -> None:
        for n in self.inventory.nodes:
            self._nodes[n.name] = _Node(config=self.baseline_config(n.name))
            self._start(n.name)

    def down(self) -> None:
        self._nodes.clear()

    def leftovers(self) -> list[str]:
        problems = [
            f"{name}: configuration differs from the baseline"
            for name, n in self._nodes.items()
            if n.config != self.baseline_config(name)
        ]
        problems += [f"{key}: {v}" for key, v in self._values.items() if v != self._baseline(key)]
        return problems + [f"{name}: not serving" for name, n in self._nodes.items() if not n.ready]

    def leftover_objects(self) -> list[str]:
        return [f"node {name}" for name in self._nodes]

    # ---- state, events, logs ----
    def states(self) -> dict[str, NodeState]:
        self.on_call("states")
        return {name: self._state(name, n) for name, n in self._nodes.items()}

    def _state(self, name: str, n: _Node) -> NodeState:
        return NodeState(
            name=name,
            status=n.status,
            generation=n.generation,
            incarnation=n.incarnation,
            restarts=n.restarts,
            ready=n.ready,
            started_at=n.started_at,
            first_output_at=n.first_output_at,
            last_exit=n.last_exit,
        )

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        self.on_call("wait_events")
        with self._cond:
            if len(self._events) <= since and timeout > 0:
                self._cond.wait_for(lambda: len(self._events) > since, timeout)
            return self._events[since:]

    def last_event_seq(self) -> int:
        return len(self._events)

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        return list(self._nodes[node].logs.get(incarnation, []))

    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]:
        lines = [ln for inc in sorted(self._nodes[node].logs) for ln in self._nodes[node].logs[inc]]
        return [ln for ln in lines if since is None or ln.ts >= since]

    def url(self, node: str) -> str:
        return self.inventory.node(node).url

    # ---- reads and writes ----
    def config(self, node: str) -> NodeConfig:
        return self._nodes[node].config

    def current(self, change: Change) -> AnyState:
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        return self._values.get(change.key, self._baseline(change.key))

    def _baseline(self, key: tuple[str, str, str]) -> AnyState:
        kind, node, subject = key
        if kind == ChangeKind.PROCESS.value:
            return ProcessState(running=False)
        if kind == ChangeKind.ADDRESS.value:
            return Value(value=self.inventory.node(node).network_address(subject) or "")
        return Value(value="management")  # the network Prometheus scrapes at baseline

    def apply(self, change: Change) -> None:
        self.on_call(f"apply {change.kind.value}")
        self.applied.append(change)
        if change.kind is ChangeKind.NODE_CONFIG:
            assert isinstance(change.after, NodeConfig)
            node = self._nodes[change.node]
            node.config = change.after
            node.generation += 1
            self._stop(change.node)
            self._start(change.node)
        else:
            self._values[change.key] = change.after
            after = change.after
            if isinstance(after, ProcessState) and after.running and "xid" in after.command:
                self._xid_broke[change.node] = datetime.now(UTC)  # the program breaks the GPU

    def xid_broke_at(self, node: str) -> datetime | None:
        return self._xid_broke.get(node)

    def restart(self, nodes: Sequence[str]) -> None:
        self.on_call("restart")
        self.restarted.append(list(nodes))
        for n in nodes:
            self._stop(n)
        for n in nodes:
            # a new generation, as every lab's restart is (a pod replaced, a container
            # restarted by the runtime's API): what tells a person's restart from the policy's
            self._nodes[n].generation += 1
            self._start(n)

    def stop(self, node: str) -> None:
        self.on_call("stop")
        self._stop(node)
        n = self._nodes[node]
        n.status, n.ready = NodeStatus.EXITED, False  # a crash loop ends too

    def start(self, node: str) -> None:
        self.on_call("start")
        n = self._nodes[node]
        if n.status is NodeStatus.RUNNING:
            return
        n.generation += 1
        n.restarts = 0
        self._start(node)

    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        self.on_call("signal")
        if Capability.SIGNALS not in self.capabilities:
            raise self._lacks(Capability.SIGNALS)
        self._stop(node)
        self._start(node)

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        if Capability.GPU_PROCESSES not in self.capabilities:
            raise self._lacks(Capability.GPU_PROCESSES)
        running = [
            v
            for (kind, n, _), v in self._values.items()
            if kind == ChangeKind.PROCESS.value and n == node and isinstance(v, ProcessState)
        ]
        return [
            GpuProcess(pid=1000 + i, name=_process_name(p.command), mib=1400)
            for i, p in enumerate(running)
            if p.running
        ]

    def check_service(self, service: str, port: int) -> None:
        if Capability.SERVICE_LINKS not in self.capabilities:
            raise self._lacks(Capability.SERVICE_LINKS)

    # ---- the scripted nodes ----
    def _emit(self, node: str, type_: EventType, ts: datetime, **payload: Any) -> None:
        with self._cond:
            seq = len(self._events) + 1
            self._events.append(LabEvent(seq=seq, ts=ts, node=node, type=type_, **payload))
            self._cond.notify_all()

    def _stop(self, name: str) -> None:
        n = self._nodes[name]
        if n.status is not NodeStatus.RUNNING or n.started_at is None:
            return
        now = datetime.now(UTC)
        n.last_exit = ExitInfo(
            incarnation=n.incarnation,
            code=0,
            started_at=n.started_at,
            first_output_at=n.first_output_at,
            finished_at=now,
        )
        n.status, n.ready = NodeStatus.EXITED, False
        self._emit(name, EventType.EXITED, now, exit=n.last_exit, stopped=True)

    def _start(self, name: str) -> None:
        n = self._nodes[name]
        outcome = self.script(name, n.config)
        runs = 1 + (outcome.restarts if isinstance(outcome, Exits) else 0)
        at = datetime.now(UTC)
        for run in range(runs):
            at = self._run_once(name, outcome, at)
            if run < runs - 1:
                n.restarts += 1
                self._emit(name, EventType.BACKOFF, at, delay_s=0.0, restarts=n.restarts)

    def _run_once(self, name: str, outcome: Outcome, at: datetime) -> datetime:
        n = self._nodes[name]
        n.incarnation += 1
        n.started_at, n.first_output_at = at, at + timedelta(seconds=FIRST_OUTPUT_S)
        n.status, n.ready = NodeStatus.RUNNING, False
        self._emit(
            name,
            EventType.STARTED,
            at,
            incarnation=n.incarnation,
            pid=None,
            generation=n.generation,
        )
        step = timedelta(microseconds=100)
        n.logs[n.incarnation] = [
            LogLine(ts=n.first_output_at + i * step, text=text)
            for i, text in enumerate(outcome.logs)
        ]
        self._emit(name, EventType.FIRST_OUTPUT, n.first_output_at, incarnation=n.incarnation)
        if isinstance(outcome, Serves):
            n.ready = True
            self._emit(name, EventType.READY, n.first_output_at, incarnation=n.incarnation)
            return n.first_output_at
        if isinstance(outcome, Hangs):
            return n.first_output_at
        finished = n.first_output_at + timedelta(seconds=outcome.after_s)
        n.last_exit = ExitInfo(
            incarnation=n.incarnation,
            code=outcome.code,
            started_at=at,
            first_output_at=n.first_output_at,
            finished_at=finished,
        )
        policy = self.inventory.node(name).restart
        restarts = policy is RestartPolicy.ALWAYS or (
            policy is RestartPolicy.ON_FAILURE and outcome.code != 0
        )
        n.status = NodeStatus.CRASH_LOOPING if restarts else NodeStatus.EXITED
        self._emit(name, EventType.EXITED, finished, exit=n.last_exit)
        return finished

    # ---- HTTP, as the nodes and Prometheus answer it ----
    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    def _handle(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        prom = self.prometheus_url()
        if prom and url.startswith(prom):
            if request.url.path == "/api/v1/alerts":
                body = {"status": "success", "data": {"alerts": self.alerts()}}
                return httpx.Response(200, content=json.dumps(body))
            return httpx.Response(404)
        for name, n in self._nodes.items():
            if url.startswith(self.url(name)):
                if not n.ready:
                    raise httpx.ConnectError("connection refused", request=request)
                if request.url.path == "/v1/chat/completions":
                    message = {"role": "assistant", "content": "OK"}
                    answer = {"choices": [{"message": message, "finish_reason": "stop"}]}
                    return httpx.Response(200, json=answer)
                if request.url.path == "/v1/completions":
                    return _completion(request, n.config)
                return httpx.Response(200)
        raise httpx.ConnectError("no route to host", request=request)


def _completion(request: httpx.Request, config: NodeConfig) -> httpx.Response:
    """A completion that follows from the model the node serves (its first argument) and the
    prompt alone, as at temperature 0: another model answers otherwise, serial or under load."""
    prompt = json.loads(request.content)["prompt"]
    model = config.args[0] if config.args else ""
    rid = request.headers.get("X-Request-Id", "fake")
    choice = {"text": f"{model}: {prompt}", "logprobs": {"token_logprobs": [-0.25, -0.5]}}
    return httpx.Response(200, json={"id": f"cmpl-{rid}", "choices": [choice]})


def _process_name(command: tuple[str, ...]) -> str:
    """The name a program holds the GPU under: its `--name`, or its program."""
    if "--name" in command[:-1]:
        return command[command.index("--name") + 1]
    return command[0] if command else ""


__all__ = ["Exits", "FakeLab", "Hangs", "Outcome", "Script", "Serves", "serves"]
