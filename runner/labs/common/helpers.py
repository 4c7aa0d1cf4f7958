"""What every lab driver does the same way: where its state lives, how it reads a runtime's time
stamps and a node's GPU process list, how it builds a node's state, what it reports as left over,
how it points Prometheus at a network, and the kubelet's crash-loop back-off."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pydantic

from runner.errors import LabError
from runner.labs.base import Capability, GpuProcess, LabDriver, LogLine, NodeState, PartDeath
from runner.labs.common.events import Incarnation
from runner.labs.common.prometheus_config import reload, wait_scraped
from runner.spec.inventory import Inventory, LabSpec
from runner.spec.kinds import NodeStatus

SCRAPED_NETWORK = "management"  # the network a lab's Prometheus scrapes exporters on at baseline


def state_root() -> Path:
    """Where labs keep their state when the inventory names no directory: $GAMEDAY_STATE_DIR,
    else the XDG state directory."""
    root = os.environ.get("GAMEDAY_STATE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "gameday"


def state_dir(lab: LabSpec) -> Path:
    """The lab's state directory: its own `state_dir`, else one named after it under the root."""
    return Path(lab.state_dir) if lab.state_dir else state_root() / lab.name


_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})?")


def utc_time(text: str) -> datetime:
    """A runtime's RFC 3339 stamp (Docker's, the kubelet's, the supervisor's) in UTC: fractions
    beyond microseconds cut, no zone read as UTC. ValueError when it is no such stamp."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text[:40]!r}")
    head, frac, zone = m.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    offset = "+00:00" if zone in (None, "Z") else zone
    return datetime.fromisoformat(head + offset).replace(microsecond=micro).astimezone(UTC)


def stamped_line(raw: str) -> LogLine | None:
    """`<RFC 3339 stamp> <text>`, as `docker logs -t`, the kubelet and the supervisor serve
    logs; None for a line without a stamp."""
    ts, _, text = raw.partition(" ")
    try:
        return LogLine(ts=utc_time(ts), text=text)
    except ValueError:
        return None


def stamped_lines(text: str) -> list[LogLine]:
    return [ln for raw in text.splitlines() if (ln := stamped_line(raw)) is not None]


class _SmiReport(pydantic.BaseModel):
    """`vllm-lab smi --json`: the processes holding the node's GPU memory (and more, unread)."""

    processes: list[GpuProcess]


def gpu_processes_of(smi_json: str) -> list[GpuProcess]:
    """The process list of `vllm-lab smi --json`'s output; LabError when it is not that."""
    try:
        return _SmiReport.model_validate_json(smi_json).processes
    except pydantic.ValidationError as exc:
        raise LabError(f"`vllm-lab smi --json` gave no process list: {exc}") from None


def node_state(
    name: str,
    status: NodeStatus,
    *,
    generation: int,
    restarts: int,
    ready: bool,
    reason: str,
    current: Incarnation | None,
    incarnations: Sequence[Incarnation],
    pid: int | None = None,
    pod: str | None = None,
) -> NodeState:
    """A node's state from the incarnations a driver recorded: the current one's number and
    times, and the newest one that exited."""
    last = next((x for i in reversed(incarnations) if (x := i.exit_info())), None)
    if current is not None:
        number = current.number
    else:
        number = incarnations[-1].number if incarnations else 0
    return NodeState(
        name=name,
        status=status,
        generation=generation,
        incarnation=number,
        restarts=restarts,
        ready=status is NodeStatus.RUNNING and ready,
        pid=pid,
        pod=pod,
        started_at=current.started_at if current else None,
        first_output_at=current.first_output_at if current else None,
        reason=reason,
        last_exit=last,
    )


def pending(name: str, generation: int, reason: str, pod: str | None = None) -> NodeState:
    """A node that has nothing running yet (no container, or a pod with none running)."""
    return NodeState(
        name=name,
        status=NodeStatus.PENDING,
        generation=generation,
        incarnation=0,
        restarts=0,
        ready=False,
        reason=reason,
        pod=pod,
    )


def moved_addresses(
    configured: dict[str, dict[str, str]], actual: dict[str, dict[str, str]]
) -> list[str]:
    """Each configured address a node no longer has."""
    problems = []
    for name, nets in configured.items():
        for net, want in nets.items():
            addr = actual.get(name, {}).get(net)
            if addr is None:
                problems.append(f"{name}: not on the {net} network")
            elif addr != want:
                problems.append(f"{name}: {net} address moved to {addr}")
    return problems


def leftovers(lab: LabDriver, own: Iterable[str], config: str = "engine config") -> list[str]:
    """Everything that differs from the lab's baseline (empty when clean): each node's `config`
    that is not the baseline's, the driver's `own` findings, nodes not serving."""
    drift = [
        f"{n.name}: {config} differs from the baseline"
        for n in lab.inventory.nodes
        if lab.config(n.name) != lab.baseline_config(n.name)
    ]
    not_serving = [
        f"{n}: not serving ({s.status.value})" for n, s in lab.states().items() if not s.ready
    ]
    return [*drift, *own, *not_serving]


def scrape_drift(inventory: Inventory, network: str) -> list[str]:
    """Prometheus scraping another network than at baseline, as a leftover."""
    if inventory.lab.monitoring is None or network == SCRAPED_NETWORK:
        return []
    return [f"Prometheus scrapes the {network} network"]


def monitoring_ready(
    inventory: Inventory,
    pdir: Path,
    timeout_s: float,
    hint: str,
    dead: Callable[[], PartDeath | None] = lambda: None,
) -> None:
    """Block until the lab's Prometheus (if it has one) has scraped every target in `pdir`;
    PartDied as soon as `dead` (the driver's `dead_part`) names a part of the lab that died."""
    url = inventory.lab.prometheus
    if inventory.lab.monitoring is not None and url is not None:
        wait_scraped(url, pdir, timeout_s, hint=hint, dead=dead)


def apply_scrape_targets(inventory: Inventory, write: Callable[[str], None], network: str) -> None:
    """Point the exporters' scrape job at `network` (`write`: the driver's way of writing the
    config) and reload Prometheus. Its discovery hands the new targets over up to 5 s later;
    whoever needs them scraped waits for that (`monitoring_ready`): a recovery step or its
    rollback, whose time it is, and a scenario before its injection, but not cleanup's undo."""
    write(network)
    reload(inventory.lab.prometheus)


def host_capabilities(inventory: Inventory) -> frozenset[Capability]:
    """A lab whose nodes are this machine's processes or containers: it reaches into a node
    (programs, signals, the GPU list) and moves its addresses; it has the inventory's
    monitoring, if any."""
    caps = {
        Capability.PROCESSES,
        Capability.SIGNALS,
        Capability.GPU_PROCESSES,
        Capability.ADDRESSES,
    }
    if inventory.lab.monitoring is not None:
        # the receiver listens on this machine, where the lab's Alertmanager runs or bridges
        caps |= {Capability.MONITORING, Capability.ALERT_DELIVERY}
    return frozenset(caps)
