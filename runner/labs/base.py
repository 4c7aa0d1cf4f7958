"""What the runner needs from a lab, whatever the lab is made of.

Every lab maps its own notion of state onto `NodeState` (status from the closed set NodeStatus,
restart count, exit code and time of the last exit, readiness), gives logs with the runtime's own
UTC timestamps (current incarnation and previous one, like `kubectl logs --previous`), and
streams events so the runner never polls with sleeps. Changes go through `Change` records that
the runner journals before applying and can invert to undo.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from runner.inventory import Inventory
from runner.scenario import LabKind, LogSource, NodeStatus


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeConfig(Frozen):
    type: Literal["node_config"] = "node_config"
    args: tuple[str, ...]
    env: dict[str, str]
    # the pod spec's enableServiceLinks on a Kubernetes lab; None where there is no such thing
    service_links: bool | None = None


class ProcessState(Frozen):
    type: Literal["process"] = "process"
    running: bool
    command: tuple[str, ...] = ()


class Value(Frozen):
    """An address, a network name: a single value a change moves from one thing to another."""

    type: Literal["value"] = "value"
    value: str


State = Annotated[NodeConfig | ProcessState | Value, Field(discriminator="type")]


class ExitInfo(Frozen):
    incarnation: int
    code: int
    started_at: datetime
    first_output_at: datetime | None
    finished_at: datetime


class NodeState(Frozen):
    name: str
    status: NodeStatus
    generation: int
    incarnation: int
    restarts: int
    ready: bool
    pid: int | None = None
    started_at: datetime | None = None
    first_output_at: datetime | None = None
    reason: str = ""
    last_exit: ExitInfo | None = None


class LogLine(Frozen):
    ts: datetime
    text: str


class GpuProcess(Frozen):
    """A process holding memory on a node's GPU, as `nvidia-smi` (and `vllm-lab smi`) lists it."""

    pid: int
    name: str
    mib: int


class RuntimeEvent(Frozen):
    """An event the lab's runtime recorded about a node (a Kubernetes Event, say)."""

    ts: datetime
    text: str
    warning: bool = False


class EventType(enum.StrEnum):
    APPLIED = "applied"
    STARTED = "started"
    FIRST_OUTPUT = "first_output"
    READY = "ready"
    UNREADY = "unready"
    EXITED = "exited"
    BACKOFF = "backoff"
    STOPPED = "stopped"
    AUX_STARTED = "aux_started"
    AUX_STOPPED = "aux_stopped"


class LabEvent(Frozen):
    seq: int
    ts: datetime
    node: str
    type: EventType
    data: dict[str, Any] = {}


class ChangeKind(enum.StrEnum):
    NODE_CONFIG = "node_config"  # the engine's args and env (re-applies the node)
    PROCESS = "process"  # a process started or stopped on a node (subject: its name)
    ADDRESS = "address"  # a node's address on a network (subject: the network)
    SCRAPE_TARGETS = "scrape_targets"  # the network Prometheus scrapes a job on (node "lab")


AnyState = NodeConfig | ProcessState | Value


class Change(Frozen):
    """One change to a lab: what (kind, node, subject), and its state before and after. Undo
    is setting the subject back to `before`; the same record serves any lab kind."""

    kind: ChangeKind
    node: str
    subject: str = ""
    before: State
    after: State
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind.value, self.node, self.subject)

    def towards(self, state: AnyState, current: AnyState, note: str) -> Change:
        """A change of the same subject from `current` to `state`."""
        return Change(
            kind=self.kind,
            node=self.node,
            subject=self.subject,
            before=current,
            after=state,
            note=note,
        )


class LabDriver(Protocol):
    kind: LabKind
    inventory: Inventory
    artifacts_dir: Path | None  # where a run wants the lab's own records (Ansible events)

    def is_up(self) -> bool: ...
    def up(self) -> None: ...
    def down(self) -> None: ...
    def states(self) -> dict[str, NodeState]: ...
    def config(self, node: str) -> NodeConfig: ...
    def current(self, change: Change) -> AnyState: ...
    def signal(self, node: str, process: str, signal: str) -> None: ...
    def start_process(self, node: str, name: str, command: Sequence[str]) -> Change: ...
    def stop_process(self, node: str, name: str) -> Change: ...
    def set_address(self, node: str, network: str, address: str) -> Change: ...
    def scrape_on(self, job: str, network: str) -> Change: ...
    def gpu_processes(self, node: str) -> list[GpuProcess]: ...
    def baseline_config(self, node: str) -> NodeConfig: ...
    def apply(self, change: Change) -> None: ...
    def restart(self, nodes: Sequence[str]) -> None: ...
    def logs(self, node: str, source: LogSource) -> list[LogLine]: ...
    def logs_of(self, node: str, incarnation: int) -> list[LogLine]: ...
    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]: ...
    def wait_events(self, since: int, timeout: float) -> list[LabEvent]: ...
    def last_event_seq(self) -> int: ...
    def url(self, node: str) -> str: ...
    def service_links(self, node: str, service: str, port: int, enabled: bool) -> Change: ...
    def runtime_events(self, node: str) -> tuple[str, list[RuntimeEvent]]: ...
    def settle(self) -> None: ...
    def monitoring_ready(self, timeout_s: float) -> None: ...
    @property
    def state_dir(self) -> Any: ...
