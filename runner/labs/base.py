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
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from runner.inventory import Inventory
from runner.scenario import LabKind, LogSource, NodeStatus


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeConfig(Frozen):
    args: tuple[str, ...]
    env: dict[str, str]


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


class EventType(enum.StrEnum):
    APPLIED = "applied"
    STARTED = "started"
    FIRST_OUTPUT = "first_output"
    READY = "ready"
    UNREADY = "unready"
    EXITED = "exited"
    BACKOFF = "backoff"
    STOPPED = "stopped"


class LabEvent(Frozen):
    seq: int
    ts: datetime
    node: str
    type: EventType
    data: dict[str, Any] = {}


class ChangeKind(enum.StrEnum):
    NODE_CONFIG = "node_config"


class Change(Frozen):
    """One change to a lab: what, where, and (by inversion) how to undo it."""

    kind: ChangeKind
    node: str
    before: NodeConfig
    after: NodeConfig
    note: str = ""

    def inverse(self) -> Change:
        return Change(
            kind=self.kind,
            node=self.node,
            before=self.after,
            after=self.before,
            note=f"undo: {self.note}" if self.note else "undo",
        )


class LabDriver(Protocol):
    kind: LabKind
    inventory: Inventory

    def is_up(self) -> bool: ...
    def up(self) -> None: ...
    def down(self) -> None: ...
    def states(self) -> dict[str, NodeState]: ...
    def config(self, node: str) -> NodeConfig: ...
    def baseline_config(self, node: str) -> NodeConfig: ...
    def apply(self, change: Change) -> None: ...
    def restart(self, nodes: Sequence[str]) -> None: ...
    def logs(self, node: str, source: LogSource) -> list[LogLine]: ...
    def logs_of(self, node: str, incarnation: int) -> list[LogLine]: ...
    def wait_events(self, since: int, timeout: float) -> list[LabEvent]: ...
    def last_event_seq(self) -> int: ...
    def url(self, node: str) -> str: ...
    def service_links(self, node: str, service: str, port: int, enabled: bool) -> Change: ...
    @property
    def state_dir(self) -> Any: ...
