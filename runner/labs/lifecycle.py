"""A node's life as a lab's runtime reports it: its processes' events, its exits, and the back-off
a crashing node waits between restarts. The local lab's supervisor daemon imports it, so it needs
pydantic and nothing else of the runner's."""

from __future__ import annotations

import enum
from datetime import datetime

from pydantic import BaseModel, ConfigDict

BACKOFF_FIRST_S = 10.0  # the kubelet's first crash-loop back-off, real-world seconds
BACKOFF_MAX_S = 300.0  # and its cap


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExitInfo(Frozen):
    incarnation: int
    code: int
    started_at: datetime
    first_output_at: datetime | None
    finished_at: datetime


class EventType(enum.StrEnum):
    APPLIED = "applied"
    STARTED = "started"
    FIRST_OUTPUT = "first_output"
    READY = "ready"
    UNREADY = "unready"
    EXITED = "exited"
    BACKOFF = "backoff"
    AUX_STARTED = "aux_started"
    AUX_STOPPED = "aux_stopped"


class LabEvent(Frozen):
    """Something the lab saw happen to a node (or to a process it runs beside the nodes). The
    fields after `type` are its payload: which are set depends on the type."""

    seq: int
    ts: datetime
    node: str
    type: EventType
    incarnation: int | None = None  # STARTED, FIRST_OUTPUT, READY, UNREADY
    pid: int | None = None  # STARTED (where the runtime shows it)
    pod: str = ""  # STARTED on Kubernetes
    generation: int | None = None  # STARTED, APPLIED: the node's configuration generation
    exit: ExitInfo | None = None  # EXITED
    stopped: bool = False  # EXITED: the lab stopped it (a re-apply, a restart), not a failure
    stop_took_s: float | None = None  # EXITED after a stop: seconds from SIGTERM to the exit
    reason: str = ""  # EXITED: the runtime's reason (Kubernetes: Error, Completed, OOMKilled)
    delay_s: float | None = None  # BACKOFF: lab seconds until the next restart
    restarts: int | None = None  # BACKOFF
    name: str = ""  # AUX_STARTED, AUX_STOPPED: the process's name

    @property
    def failure(self) -> ExitInfo | None:
        """The exit, if this is the node exiting on its own (not stopped by the lab)."""
        return self.exit if self.type is EventType.EXITED and not self.stopped else None


def crash_loop_backoff_s(restart: int) -> float:
    """Real-world seconds the kubelet waits before restart number `restart` + 1 of a crashing
    container (0-based): 10 s, doubling, at most 300 s."""
    return min(BACKOFF_FIRST_S * 2.0 ** min(restart, 16), BACKOFF_MAX_S)  # no float overflow
