"""Lab drivers: one abstract class (runner.labs.base.LabDriver), one implementation per lab kind,
each registered once (runner.labs.registry).

- local: engine nodes as local processes under a supervisor daemon (runner.labs.local)
- compose: engine nodes as containers, Compose CLI + docker SDK + Ansible (runner.labs.compose)
- kubernetes: engine nodes as pods, the official client (runner.labs.kubernetes)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from runner.errors import LabError

if TYPE_CHECKING:  # imported where used: the local lab's supervisor imports only what it needs
    from runner.labs.base import LabDriver, NodeState
    from runner.spec.inventory import Inventory


def open_lab(inventory: Inventory) -> LabDriver:
    """The driver of the inventory's lab kind (runner.labs.registry), or its driver of an
    adopted deployment."""
    from runner.labs.registry import entry

    return entry(inventory.lab.kind).open(inventory)


def restart_scope(inventory: Inventory, node: str) -> list[str]:
    """What must restart together with `node`: the largest inventory group it belongs to (its
    tensor-parallel group: a head restarted alone never gets its workers back), or itself."""
    groups = inventory.node(node).groups
    best = max((inventory.resolve(g) for g in groups), key=len, default=[])
    return [n.name for n in best] or [node]


def group_restart_needed(group: list[str], reapplied: set[str]) -> bool:
    """Part of a tensor-parallel group re-applied (so restarted) without the rest never rejoins
    it (the head-only-restart lesson): the whole group must restart together."""
    return len(group) > 1 and bool(reapplied & set(group)) and not set(group) <= reapplied


def heal(lab: LabDriver, timeout_s: float) -> list[list[str]]:
    """Restart, group by group, every node that is not serving; wait until all are. Returns the
    groups it restarted."""
    states = lab.states()
    groups: list[list[str]] = []
    for name, st in states.items():
        if not st.ready and not any(name in g for g in groups):
            groups.append(restart_scope(lab.inventory, name))
    for g in groups:
        lab.restart(g)
    if groups:
        wait_all_ready(lab, timeout_s)
    return groups


def wait_all_ready(lab: LabDriver, timeout_s: float) -> dict[str, NodeState]:
    """Block on the lab's events until every node serves; LabError after `timeout_s` (lab s)."""
    deadline = time.monotonic() + timeout_s
    seq = lab.last_event_seq()
    while True:
        states = lab.states()
        if all(s.ready for s in states.values()):
            return states
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LabError(
                f"lab {lab.inventory.lab.name!r} is up but not every node is ready after "
                f"{timeout_s:.1f} s: "
                + ", ".join(
                    f"{n}={s.status.value}" + (f" ({s.reason})" if s.reason else "")
                    for n, s in states.items()
                ),
                hint=f"see the node logs under {lab.state_dir}",
            )
        evs = lab.wait_events(seq, min(5.0, remaining))
        seq = evs[-1].seq if evs else seq


__all__ = [
    "group_restart_needed",
    "heal",
    "open_lab",
    "restart_scope",
    "wait_all_ready",
]
