"""Putting a lab back: the one place that turns journalled changes into their undo.

Stacked changes on one node (inject, then a shortcut, then a fix) are undone with a single
re-apply of that node's configuration from before the first of them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from runner.errors import LabError
from runner.labs import heal, wait_all_ready
from runner.labs.base import Change, ChangeKind, LabDriver, ProcessState
from runner.run import journal, orphans
from runner.spec.timing import TimeScale
from runner.spec.usersteps import HttpStep


def restore(
    lab: LabDriver,
    changes: Sequence[Change],
    note: str,
    applied_hook: Callable[[Change, float], None] | None = None,
) -> list[Change]:
    """Set every subject the `changes` touched (given oldest first) back to its state before the
    oldest change to it, newest subject first. Subjects already back are left alone, so a
    process this run started and then stopped needs nothing, and so is an adopted node the team
    deployed anew since (an old baseline is never written over a newer deployment). Returns
    what it applied;
    `applied_hook` hears of each undo as it is applied, with the seconds it took."""
    firsts: dict[tuple[str, str, str], Change] = {}
    for change in changes:
        firsts.setdefault(change.key, change)
    configs = any(c.kind is ChangeKind.NODE_CONFIG for c in firsts.values())
    redeployed = set(lab.redeployed()) if configs else set()
    applied = []
    for first in reversed(list(firsts.values())):
        if first.kind is ChangeKind.NODE_CONFIG and first.node in redeployed:
            continue
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


def reapply_baseline(
    lab: LabDriver, applied_hook: Callable[[Change, float], None] | None = None
) -> list[Change]:
    """Every node whose configuration differs from the lab's baseline gets the baseline again
    (a user-written step may change the lab behind the journal's back). Returns the re-applies."""
    drifted = []
    for n in lab.inventory.nodes:
        base, now = lab.baseline_config(n.name), lab.config(n.name)
        if now != base:
            drifted.append(Change(kind=ChangeKind.NODE_CONFIG, node=n.name, before=base, after=now))
    return restore(lab, drifted, "re-apply the baseline", applied_hook)


def baseline_notes(
    applied: list[Change], reasons: list[str], who: str = "cleanup", undone: Sequence[Change] = ()
) -> list[str]:
    """What the report says of a baseline check, one line per reason it was made; `who` made it
    (cleanup, or a rollback in a recovery step). `undone`: what the journal's undos restored just
    before the check, which the note names, since the timeline shows them (a node found "at its
    baseline" had been put back there by the same cleanup)."""
    nodes = ", ".join(c.node for c in applied)
    if nodes:
        return [f"{who} re-applied the baseline of {nodes}: {r}" for r in reasons]
    if undone:
        back = ", ".join(dict.fromkeys(c.node for c in undone))
        return [
            f"{who} found every node at its baseline once it had restored {back} from the "
            f"journal ({r})"
            for r in reasons
        ]
    return [f"{who} found every node at its baseline ({r})" for r in reasons]


@dataclass(frozen=True)
class CleanupOutcome:
    open_changes: int
    applied: list[Change]
    lab_was_down: bool
    restarted: list[list[str]]
    steps: list[str] = field(default_factory=list)  # user-step undos run, baselines re-applied
    redeployed: list[str] = field(default_factory=list)  # adopted nodes left as the team made them


def unwind(
    lab: LabDriver,
    changes: Sequence[tuple[int, Change]],
    steps: Sequence[journal.OpenStep],
    undo_step: Callable[[journal.OpenStep], None],
    note: str,
    applied_hook: Callable[[Change, float], None] | None = None,
) -> list[Change]:
    """Undo one journal's changes and user-written steps, newest first: the changes made since
    the newest user step are restored together, then that step's undo runs, and so on back to
    the oldest (an undo may need the lab as it was when its step ran). Returns what `restore`
    applied. Baseline entries (steps without an undo) are the caller's, after all of this."""
    items: list[tuple[int, Change | journal.OpenStep]] = [*changes, *((s.seq, s) for s in steps)]
    done: list[Change] = []
    batch: list[Change] = []  # newest first
    for _, item in sorted(items, key=lambda x: x[0], reverse=True):
        if isinstance(item, Change):
            batch.append(item)
            continue
        done += restore(lab, batch[::-1], note, applied_hook)
        batch = []
        if item.undo is not None:
            undo_step(item)
    return done + restore(lab, batch[::-1], note, applied_hook)


def _xid_nodes(items: Sequence[journal.OpenChange]) -> list[str]:
    """The nodes an open change started a GPU XID's program on (`vllm-lab xid`)."""
    return sorted(
        {
            i.change.node
            for i in items
            if isinstance(i.change.after, ProcessState) and "xid" in i.change.after.command
        }
    )


def cleanup_lab(lab: LabDriver) -> CleanupOutcome:
    """`gameday cleanup`: undo whatever interrupted runs left (their user-written steps' undos
    included), close their journals, and get every node serving again (a killed run may have
    left a head that exited 0, which no journal entry undoes: its group is restarted together).
    Idempotent."""
    items = journal.open_changes(lab.state_dir)  # newest first
    steps = journal.open_steps(lab.state_dir)
    applied: list[Change] = []
    restarted: list[list[str]] = []
    lines: list[str] = []
    failed: list[journal.OpenStep] = []
    # a command step of a killed run may still be running (and changing the lab): first of all
    lines += _stop_orphans(steps)
    down = not lab.is_up()
    redeployed: list[str] = []
    # A local lab that is down holds no changes: its nodes start from the inventory's baseline.
    if not down:
        lab.settle()
        redeployed = lab.redeployed()
        applied, undone, failed = _unwind_journals(lab, items, steps)
        lines += undone
        for node in _xid_nodes(items):  # an interrupted run's XID lines page no later run
            lab.reboot_kernel_log(node)
        reasons = list(dict.fromkeys(s.reason for s in reversed(steps) if s.undo is None))
        if reasons:
            again = reapply_baseline(lab)
            lines += baseline_notes(again, reasons, undone=applied)
            applied += again
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
    for step in steps:
        if step not in failed:
            journal.mark_undone(step)
    journal.close_journals(lab.state_dir)
    if failed:
        raise LabError(
            "the undo of "
            + "; ".join(f"{s.what} (scenario {s.scenario})" for s in failed)
            + " failed: "
            + "; ".join(ln for ln in lines if "FAILED" in ln),
            hint="fix what it needs and run `gameday cleanup` again (the undo stays journalled)",
        )
    return CleanupOutcome(
        open_changes=len(items) + len(steps),
        applied=applied,
        lab_was_down=down,
        restarted=restarted,
        steps=lines,
        redeployed=redeployed,
    )


def _stop_orphans(steps: Sequence[journal.OpenStep]) -> list[str]:
    """Stop the processes the open steps' commands left running; the report's lines."""
    by_mark = {s.mark: s for s in steps if s.mark}
    stopped = orphans.stop_marked(by_mark.keys())
    return [
        f"cleanup stopped what {by_mark[m].what} (scenario {by_mark[m].scenario}) left running: "
        f"pid {', '.join(map(str, pids))}"
        for m, pids in stopped.items()
    ]


def _unwind_journals(
    lab: LabDriver, items: list[journal.OpenChange], steps: list[journal.OpenStep]
) -> tuple[list[Change], list[str], list[journal.OpenStep]]:
    """`unwind` each journal, the newest run's first. Returns what was applied, the report's
    lines for the undos run, and the steps whose undo failed."""
    import httpx

    # runner.run imports this module: its user-step runner is imported when needed
    from runner.run.stepexec import run_undo

    applied: list[Change] = []
    lines: list[str] = []
    failed: list[journal.OpenStep] = []
    spec = lab.inventory.lab
    scale = TimeScale.of(spec)

    with httpx.Client(trust_env=False) as client:

        def undo_step(step: journal.OpenStep) -> None:
            if isinstance(step.undo, HttpStep):
                # an admin endpoint answers once its node serves again after the undos so far
                with contextlib.suppress(LabError):
                    wait_all_ready(lab, min(scale.boot_timeout_lab(spec), scale.to_lab(30) + 1))
            ok, line = run_undo(lab, step, client, lambda _t, _ts: None)
            lines.append(line)
            if not ok:
                failed.append(step)

        for path in sorted({i.journal for i in items} | {s.journal for s in steps}, reverse=True):
            changes = [(i.seq, i.change) for i in items if i.journal == path]
            mine = [s for s in steps if s.journal == path]
            applied += unwind(lab, changes, mine, undo_step, "gameday cleanup")
    return applied, lines, failed
