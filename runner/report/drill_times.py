"""A drill's part of the reports: its times against the scenario's windows, the people's
actions, the shortcuts tried and the hints used, as rows every format renders its own way."""

from __future__ import annotations

from runner.results.durations import wall_against, wall_s
from runner.results.schema import DrillRecord


def summary(d: DrillRecord) -> list[tuple[str, str]]:
    """(label, value) rows: outcome and the people's times (wall seconds since the fault), each
    against its window converted to real-world seconds first (runner.results.durations)."""
    return [
        ("outcome", d.outcome.value),
        ("handed over", d.handed_over_at.isoformat() if d.handed_over_at else "-"),
        (
            "time to detect (first alert)",
            wall_against(d.time_to_detect_s, d.time_scale, d.detect_within_s),
        ),
        ("time to acknowledge", wall_s(d.time_to_acknowledge_s)),
        ("time to recover", wall_against(d.time_to_recover_s, d.time_scale, d.recover_within_s)),
        ("hints used", str(len(d.hints))),
        ("shortcuts tried", str(len(d.shortcuts))),
    ]


def action_rows(d: DrillRecord) -> list[tuple[str, str, str, str]]:
    """(at, what, nodes, step) per observed action; a shortcut's step names it and its why."""
    rows = []
    for a in d.actions:
        step = a.step or "-"
        if a.shortcut:
            step = f"SHORTCUT {a.step}: {a.why}"
        rows.append((f"{a.at_s:.1f} s", f"{a.kind.value}: {a.detail}", ", ".join(a.nodes), step))
    return rows


def properties(d: DrillRecord) -> dict[str, str]:
    """JUnit properties: the times, the outcome, and each shortcut tried (a finding, not a
    failure) and hint used."""
    props = {
        "mode": "drill",
        "outcome": d.outcome.value,
        "time_to_detect_s": "" if d.time_to_detect_s is None else f"{d.time_to_detect_s:.3f}",
        "time_to_acknowledge_s": ""
        if d.time_to_acknowledge_s is None
        else f"{d.time_to_acknowledge_s:.3f}",
        "time_to_recover_s": "" if d.time_to_recover_s is None else f"{d.time_to_recover_s:.3f}",
        "hints_used": str(len(d.hints)),
        "shortcuts_tried": str(len(d.shortcuts)),
    }
    for i, a in enumerate(d.shortcuts, 1):
        props[f"shortcut {i}"] = f"{a.step} at {a.at_s:.1f} s: {a.why}"
    for h in d.hints:
        props[f"hint {h.index}"] = f"at {h.at_s:.1f} s" + (" (asked)" if h.requested else "")
    return props
