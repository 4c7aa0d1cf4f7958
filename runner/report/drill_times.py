"""A drill's part of the reports: its times against the scenario's windows, the people's
actions, the shortcuts tried and the hints used, as rows every format renders its own way."""

from __future__ import annotations

from runner.results.durations import person_against, real_s, system_against, wall_s
from runner.results.schema import DrillRecord, ImpactFigures, PhaseFigures, RunMode, ScenarioResult


def scenario_times(s: ScenarioResult, time_scale: float) -> tuple[str, str, str]:
    """A scenario's times to fail, detect and recover as the run's table shows them: the
    system's real-world (the lab's seconds in brackets), but a drill's time to recover, a
    person's, in wall seconds: no lab bracket, which would read as if the lab's clock had
    counted it."""
    recover = real_s(s.time_to_recover_s, time_scale)
    if s.drill is not None:
        recover = wall_s(s.time_to_recover_s)
    return (
        real_s(s.time_to_fail_s, time_scale),
        real_s(s.time_to_detect_s, time_scale),
        recover,
    )


def detect_real_s(d: DrillRecord) -> float | None:
    """The drill's time to detect in real-world seconds: the first alert fires on the lab's
    scaled clock (Prometheus's `for:`), so it is the system's time, measured in wall seconds."""
    return None if d.time_to_detect_s is None else d.time_to_detect_s * d.time_scale


def _requests(f: PhaseFigures | None) -> str:
    if f is None or f.sent == 0:
        return "none sent"
    return f"{f.sent} sent, {f.failed} failed ({f.error_rate or 0.0:.1%})"


def users_rows(imp: ImpactFigures) -> list[tuple[str, str]]:
    """What the load's users felt while people worked: the requests sent from the fault in
    place until service was back (a drill's fault phase: no recovery step of gameday's
    restores it), and after."""
    per = {f.phase: f for f in imp.phases}
    return [
        ("requests while people worked", _requests(per.get("fault"))),
        ("requests after service was back", _requests(per.get("verify"))),
    ]


def summary(d: DrillRecord, impact: ImpactFigures | None = None) -> list[tuple[str, str]]:
    """(label, value) rows: outcome and times against the scenario's windows, all compared in
    real-world seconds: the time to detect (the system's) converted from the wall seconds it
    was measured in, the people's wall seconds as they are (runner.results.durations); and,
    with the scenario's load's `impact`, the requests that failed while people worked."""
    return [
        ("outcome", d.outcome.value),
        ("handed over", d.handed_over_at.isoformat() if d.handed_over_at else "-"),
        (
            "time to detect (first alert)",
            system_against(detect_real_s(d), d.time_scale, d.detect_within_s),
        ),
        ("time to acknowledge", wall_s(d.time_to_acknowledge_s)),
        ("time to recover", person_against(d.time_to_recover_s, d.recover_within_s)),
        ("hints used", str(len(d.hints))),
        ("shortcuts tried", str(len(d.shortcuts))),
        *(users_rows(impact) if impact is not None else []),
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


def properties(d: DrillRecord, mode: RunMode) -> dict[str, str]:
    """JUnit properties: the mode (a drill's or a workshop seat's), the outcome, the times that
    were measured (absent, not empty, when not), and each shortcut tried (a finding, not a
    failure) and hint used."""
    props = {"mode": mode.value, "outcome": d.outcome.value}
    times = {
        "time_to_detect_s": d.time_to_detect_s,
        "time_to_acknowledge_s": d.time_to_acknowledge_s,
        "time_to_recover_s": d.time_to_recover_s,
    }
    props |= {name: f"{value:.3f}" for name, value in times.items() if value is not None}
    props |= {"hints_used": str(len(d.hints)), "shortcuts_tried": str(len(d.shortcuts))}
    for i, a in enumerate(d.shortcuts, 1):
        props[f"shortcut {i}"] = f"{a.step} at {a.at_s:.1f} s: {a.why}"
    for h in d.hints:
        props[f"hint {h.index}"] = f"at {h.at_s:.1f} s" + (" (asked)" if h.requested else "")
    return props
