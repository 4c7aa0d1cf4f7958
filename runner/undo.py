"""Putting a lab back: the one place that turns journalled changes into their undo.

Stacked changes on one node (inject, then a shortcut, then a fix) are undone with a single
re-apply of that node's configuration from before the first of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from runner import journal
from runner.errors import LabError
from runner.labs import heal, wait_all_ready
from runner.labs.base import Change, LabDriver
from runner.timing import TimeScale


def restore(
    lab: LabDriver,
    changes: Sequence[Change],
    note: str,
    applied_hook: Callable[[Change, float], None] | None = None,
) -> list[Change]:
    """Set every subject the `changes` touched (given oldest first) back to its state before the
    oldest change to it, newest subject first. Subjects already back are left alone, so a
    process this run started and then stopped needs nothing. Returns what it applied;
    `applied_hook` hears of each undo as it is applied, with the seconds it took."""
    firsts: dict[tuple[str, str, str], Change] = {}
    for change in changes:
        firsts.setdefault(change.key, change)
    applied = []
    for first in reversed(list(firsts.values())):
        current = lab.current(first)
        if current == first.before:
            continue
        undo = first.towards(first.before, current, note)
        t0 = time.monotonic()
        lab.apply(undo)
        if applied_hook is not None:
            applied_hook(undo, time.monotonic() - t0)
        applied.append(undo)
    return applied


@dataclass(frozen=True)
class CleanupOutcome:
    open_changes: int
    applied: list[Change]
    lab_was_down: bool
    restarted: list[list[str]]


def cleanup_lab(lab: LabDriver) -> CleanupOutcome:
    """`gameday cleanup`: undo whatever interrupted runs left, close their journals, and get
    every node serving again (a killed run may have left a head that exited 0, which no journal
    entry undoes: its group is restarted together). Idempotent."""
    items = journal.open_changes(lab.state_dir)  # newest first
    applied: list[Change] = []
    restarted: list[list[str]] = []
    down = not lab.is_up()
    # A local lab that is down holds no changes: its nodes start from the inventory's baseline.
    if not down:
        lab.settle()
        if items:
            applied = restore(lab, [i.change for i in reversed(items)], "gameday cleanup")
        spec = lab.inventory.lab
        scale = TimeScale.of(spec)
        boot = scale.boot_timeout_lab(spec)
        try:
            # a node the undo re-applied gets 30 s (real) to come back by itself
            wait_all_ready(lab, min(boot, scale.to_lab(30) + 1))
        except LabError:
            restarted = heal(lab, boot)
    for item in items:
        journal.mark_undone(item)
    journal.close_journals(lab.state_dir)
    return CleanupOutcome(
        open_changes=len(items), applied=applied, lab_was_down=down, restarted=restarted
    )
