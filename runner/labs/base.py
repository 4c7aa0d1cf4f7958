"""What the runner needs from a lab, whatever the lab is made of.

Every lab maps its own notion of state onto `NodeState` (status from the closed set NodeStatus,
restart count, exit code and time of the last exit, readiness), gives logs with the runtime's own
UTC timestamps (current incarnation and previous one, like `kubectl logs --previous`), and
streams events so the runner never polls with sleeps. Changes go through `Change` records that
the runner journals before applying and can invert to undo.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from runner.errors import LabError
from runner.labs.lifecycle import EventType as EventType  # re-exported: a lab's events are its API
from runner.labs.lifecycle import ExitInfo as ExitInfo
from runner.labs.lifecycle import Frozen as Frozen
from runner.labs.lifecycle import LabEvent as LabEvent
from runner.results.redact import redact
from runner.results.schema import PartDeath as PartDeath  # the lab reports it, a result keeps it
from runner.results.schema import truncate
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import Inventory
from runner.spec.kinds import LabKind, LogSource, NodeStatus


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


class NodeState(Frozen):
    name: str
    status: NodeStatus
    generation: int
    incarnation: int
    restarts: int
    ready: bool
    # where the node runs now: its process id, or on Kubernetes its pod (None: nothing seen)
    pid: int | None = None
    pod: str | None = None
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


LAST_LINES = 10  # of a dead part's output, kept in its record
MAX_LINE = 500  # characters of each of those lines


class PartDied(LabError):
    """A part the lab started died while something waited on it: the wait stops at once."""

    def __init__(self, death: PartDeath) -> None:
        super().__init__(
            death.summary(), hint=f"its whole output: {death.log}" if death.log else None
        )
        self.death = death


def last_lines(text: str, n: int = LAST_LINES) -> tuple[str, ...]:
    """The last `n` non-blank lines of a part's output, redacted (secrets a program printed,
    its command line with a token, never reach a report)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return tuple(truncate(redact(ln), MAX_LINE) for ln in lines[-n:])


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


class Capability(enum.StrEnum):
    """What a lab can do beyond starting, stopping and reconfiguring its nodes. A scenario that
    needs one its lab lacks is reported as not applicable there before anything runs."""

    PROCESSES = "processes"  # start or stop a program on a node (node access)
    SIGNALS = "signals"  # signal a process inside a node (exec)
    GPU_PROCESSES = "gpu_processes"  # list the processes holding a node's GPU
    ADDRESSES = "addresses"  # move a node's address on a network (DHCP)
    MONITORING = "monitoring"  # a Prometheus with the lab's rules and targets
    # its Alertmanager reaches the runner's webhook receiver (monitoring.receiver_listen)
    ALERT_DELIVERY = "alert_delivery"
    SERVICE_LINKS = "service_links"  # real Services whose variables the runtime injects


class LabDriver(abc.ABC):
    """One lab, whatever it is made of. Reads (`states`, `config`, `current`, logs, events) and
    writes (`apply`, `restart`, `signal`) only: planning a change is plain functions over these
    (runner.labs.common.planning), so every lab plans alike."""

    kind: LabKind
    label: str  # how reports name the lab ("local lab")
    capabilities: frozenset[Capability]
    inventory: Inventory
    artifacts_dir: Path | None = None  # where a run wants the lab's own records (Ansible events)
    # Lab seconds allowed on top of a converted window for what does not scale with the lab's
    # time: starting an interpreter, importing, stopping the previous incarnation.
    start_cost_s: float = 3.0
    # Lab seconds a restart policy may take beyond its scaled back-off (the runtime noticing the
    # exit, scheduling the restart).
    restart_slack_s: float = 5.0
    # Whether states() give a running node's first output as soon as it is written (Kubernetes
    # learns it only once the pod is ready or has exited).
    reports_first_output: bool = True

    # ---- lifecycle ----
    @property
    @abc.abstractmethod
    def state_dir(self) -> Path: ...
    @abc.abstractmethod
    def is_up(self) -> bool: ...
    @abc.abstractmethod
    def up(self) -> None: ...
    @abc.abstractmethod
    def down(self) -> None: ...
    @abc.abstractmethod
    def leftovers(self) -> list[str]:
        """Everything that differs from the lab's baseline (empty when clean)."""

    @abc.abstractmethod
    def leftover_objects(self) -> list[str]:
        """What of this lab exists now (processes, containers, Kubernetes objects): after
        `down`, nothing."""

    def settle(self) -> None:
        """Before an undo: let what an interrupted run left in flight finish (none by default)."""
        return None

    def monitoring_ready(self, timeout_s: float) -> None:
        """Block until the lab's Prometheus has scraped every target once (no monitoring:
        return). `up()` does not wait for it: Prometheus hands its first targets over only after
        5 s of wall time, so only what reads or changes monitoring waits."""
        return None

    def reboot_kernel_log(self, node: str) -> None:
        """The node's kernel log, and the watch that counts its lines, as after a reboot: a
        scenario whose fault the kernel logged (a GPU XID) leaves no line behind for the next
        run's alert to read as its own. Nothing by default: a lab whose nodes' kernel log is not
        the lab's own to write."""
        return None

    def xid_broke_at(self, node: str) -> datetime | None:
        """When a GPU XID broke the node's device, on the node's clock (vllmfacts.xid's fault
        file); None when no fault is held or the lab cannot read it."""
        return None

    def dead_part(self) -> PartDeath | None:
        """The first part the lab started beside the engines (its monitoring) that has exited
        or crash-loops since the lab came up; None when all of them run (or the lab has none).
        Every wait on those parts asks, so that it stops at a death instead of at its timeout."""
        return None

    def prometheus_url(self) -> str | None:
        """Where the runner reaches the lab's Prometheus (None: the lab has none). Default: the
        inventory's; a lab whose Prometheus moves (a pod's IP) finds it."""
        return self.inventory.lab.prometheus

    # ---- state, events, logs ----
    @abc.abstractmethod
    def states(self) -> dict[str, NodeState]: ...
    @abc.abstractmethod
    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        """The events after sequence number `since`, blocking up to `timeout` for the first."""

    @abc.abstractmethod
    def last_event_seq(self) -> int: ...

    def events_behind(self, node: str) -> bool:
        """The runtime has recorded a start or an exit of the node that the event feed has not
        shown yet. A lab whose states and events come from one source is never behind."""
        return False

    @abc.abstractmethod
    def logs_of(self, node: str, incarnation: int) -> list[LogLine]: ...
    def stood_in_by(self, node: str, incarnation: int) -> int | None:
        """The incarnation whose log `logs_of` gave for this one, whose own log the runtime
        dropped before the lab read it (None: its own). Only Kubernetes drops one: the kubelet
        keeps a container's log while it is the current or the previous one."""
        return None

    @abc.abstractmethod
    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]: ...

    def logs(self, node: str, source: LogSource) -> list[LogLine]:
        """The current incarnation's log, or the last exited one's (`kubectl logs --previous`)."""
        st = self.states()[node]
        if source is LogSource.PREVIOUS:
            return [] if st.last_exit is None else self.logs_of(node, st.last_exit.incarnation)
        return self.logs_of(node, st.incarnation)

    def runtime_events(self, node: str) -> tuple[str, list[RuntimeEvent]]:
        """What the runtime recorded about the node, titled (none by default)."""
        return "", []

    @abc.abstractmethod
    def url(self, node: str) -> str: ...

    # ---- reads and writes of changes ----
    def baseline_config(self, node: str) -> NodeConfig:
        n = self.inventory.node(node)
        return NodeConfig(args=tuple(n.rendered_args()), env=dict(n.env))

    @abc.abstractmethod
    def config(self, node: str) -> NodeConfig: ...
    @abc.abstractmethod
    def current(self, change: Change) -> AnyState:
        """The present state of the change's subject."""

    @abc.abstractmethod
    def apply(self, change: Change) -> None: ...
    @abc.abstractmethod
    def restart(self, nodes: Sequence[str]) -> None:
        """Restart the nodes together: all stopped, then all started."""

    @abc.abstractmethod
    def stop(self, node: str) -> None:
        """Stop the node and keep it stopped (status `exited`, no restart by its policy) until
        `start`, a restart or a re-apply starts it again."""

    @abc.abstractmethod
    def start(self, node: str) -> None:
        """Start a node `stop` stopped (a new generation); a running node is left as it is."""

    def applied_via(self, kind: ChangeKind) -> str:
        """How this lab applies a change of that kind, for the change's note (empty: directly)."""
        return ""

    def process_command(self, command: Sequence[str]) -> tuple[str, ...]:
        """The command line a program started on a node runs as on this lab."""
        return tuple(command)

    # ---- an adopted deployment's record (runner.labs.common.adoption); none on other labs ----
    def redeployed(self) -> list[str]:
        """The adopted nodes whose live spec is neither the saved baseline nor a change
        gameday made: the team deployed them anew since adoption."""
        return []

    def readopt(self) -> None:
        """Take what the adopted deployment runs now as its baseline."""
        raise LabError(f"the {self.label} adopts no deployment: there is nothing to re-adopt")

    def lease(self) -> datetime | None:
        """When the fault lease on the adopted deployment ends (None: no change of gameday's
        is held there)."""
        return None

    def renew_lease(self) -> None:
        """Push a held fault lease forward (a live runner's heartbeat)."""
        return None

    def end_lease(self) -> list[str]:
        """Put back what a lease covers from the lease's own record and drop it; the nodes
        put back (one deployed anew is left as it is)."""
        return []

    # ---- what only some labs can do (see `capabilities`) ----
    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        raise self._lacks(Capability.SIGNALS)

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        raise self._lacks(Capability.GPU_PROCESSES)

    def check_service(self, service: str, port: int) -> None:
        """LabError unless the lab has a Service of that name with that port."""
        raise self._lacks(Capability.SERVICE_LINKS)

    # ---- facts a user-written step reads from its environment ----
    def facts(self) -> dict[str, str]:
        """The lab as environment variables: its inventory (absolute path), name and kind, and
        each node's URL and address (GAMEDAY_NODE_<NAME>_URL, NAME upper-cased, `-` as `_`).
        Drivers add their own (a compose project, a kube context)."""
        facts = {
            "GAMEDAY_LAB": str(self.inventory.path.resolve()),
            "GAMEDAY_LAB_NAME": self.inventory.lab.name,
            "GAMEDAY_LAB_KIND": self.kind.value,
        }
        for n in self.inventory.nodes:
            key = n.name.upper().replace("-", "_")
            facts[f"GAMEDAY_NODE_{key}_ADDRESS"] = n.address
            try:
                facts[f"GAMEDAY_NODE_{key}_URL"] = self.url(n.name)
            except LabError:
                continue  # a node with no address yet (a pod not scheduled) has no URL
        return facts

    def _lacks(self, cap: Capability) -> LabError:
        return LabError(
            f"the {self.label} cannot do this: it lacks {cap.value}",
            hint="the scenario should have been reported as not applicable to this lab",
        )
