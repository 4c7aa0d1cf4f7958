"""Each scenario's times over past runs, read from the result.json of every run in the reports
folder (oldest first). A regression in time to recover (slower by more than REGRESSION_RATIO, or
not recovered where the previous run was) is flagged: it is what a runbook's CI most wants to
see.

Like is compared with like: a run with the run of the same mode before it (a run with a run, a
drill with a drill, a seat's drill with a seat's), never a person's recovery with gameday's.
A drill's or a seat's time to recover is the people's, in wall seconds; every other time is
the system's, real-world seconds (runner.results.durations). A person's wall second is a
real-world second, so one chart axis holds them all.

An inconclusive scenario (a window missed only by the machine's load) is no regression, and its
times, stretched by that load, are no baseline: the next run is compared with the one before."""

from __future__ import annotations

import enum
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from runner.errors import InputError
from runner.results.durations import real_s, wall_s
from runner.results.rundirs import run_dirs
from runner.results.schema import RunMode, ScenarioResult, Verdict, load_result

REGRESSION_RATIO = 1.10  # slower than this times the previous run's time to recover


class Measure(enum.StrEnum):
    FAIL = "time_to_fail_s"
    DETECT = "time_to_detect_s"
    RECOVER = "time_to_recover_s"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Point(_Frozen):
    """One scenario in one run; changes against the run of the same mode before it. Time to
    fail and detect are the system's (real-world seconds); time to recover is real-world in a run
    and the people's wall seconds in a drill or a seat's drill (see `people`)."""

    run_id: str
    started_at: datetime
    lab: str
    time_scale: float = 1.0  # the lab's; its own seconds are shown in brackets where not 1
    mode: RunMode = RunMode.RUN
    verdict: Verdict
    time_to_fail_s: float | None
    time_to_detect_s: float | None
    time_to_recover_s: float | None
    change_s: dict[Measure, float | None] = {}
    recover_regressed: bool = False
    # the share of the load's requests that failed during the fault (a scenario with a `load`)
    fault_error_rate: float | None = None
    # the lab's share of that load (impact.load_scale): rates at different shares differ in load
    load_scale: float = 1.0


class Trend(_Frozen):
    scenario: str
    points: list[Point]


class History(_Frozen):
    reports: str
    trends: list[Trend]
    unreadable: list[str]  # run folders whose result.json could not be read, with why


def load_history(root: Path, scenario: str | None = None) -> History:
    """Every scenario's trend (or only `scenario`'s), from the runs in `root`; InputError when
    there is no run, none that can be read, or none of `scenario`."""
    by_id: dict[str, list[Point]] = {}
    unreadable: list[str] = []
    runs = run_dirs(root)
    for run_dir in runs:
        try:
            result = load_result(run_dir / "result.json")
        except InputError as exc:
            unreadable.append(exc.message)
            continue
        for s in result.scenarios:
            if s.verdict is Verdict.SKIPPED or (scenario is not None and s.id != scenario):
                continue
            by_id.setdefault(s.id, []).append(
                Point(
                    run_id=result.run_id,
                    started_at=result.started_at,
                    lab=result.lab.name,
                    time_scale=result.lab.time_scale,
                    mode=result.mode,
                    verdict=s.verdict,
                    time_to_fail_s=s.time_to_fail_s,
                    time_to_detect_s=s.time_to_detect_s,
                    time_to_recover_s=s.time_to_recover_s,
                    fault_error_rate=_fault_rate(s),
                    load_scale=s.impact.load_scale if s.impact is not None else 1.0,
                )
            )
    if not runs:
        raise InputError("no runs found", file=root, hint="gameday run first")
    readable = len(runs) - len(unreadable)
    if not readable:
        raise InputError(
            f"no run could be read ({len(runs)} run folder(s)); the first: {unreadable[0]}",
            file=root,
            hint="gameday run first, or remove the broken run folders",
        )
    if scenario is not None and scenario not in by_id:
        raise InputError(
            f"no run of scenario {scenario!r} in {readable} readable run(s)",
            file=root,
            hint="`gameday history` with no scenario lists those that ran",
        )
    trends = [Trend(scenario=sid, points=_compared(pts)) for sid, pts in sorted(by_id.items())]
    return History(reports=str(root), trends=trends, unreadable=unreadable)


def _fault_rate(s: ScenarioResult) -> float | None:
    if s.impact is None:
        return None
    return next((f.error_rate for f in s.impact.phases if f.phase == "fault"), None)


def people(p: Point, m: Measure) -> bool:
    """Whether `m` of `p` is a person's time (wall seconds) rather than the system's: a drill's
    or a seat's time to recover."""
    return p.mode is not RunMode.RUN and m is Measure.RECOVER


def shown(p: Point, m: Measure) -> str:
    """`m` of `p` as a person reads it: "146.0 s wall" for a person's time, "590.0 s [5.900 s
    lab]" for the system's."""
    value = getattr(p, m.value)
    return wall_s(value) if people(p, m) else real_s(value, p.time_scale)


def _compared(points: list[Point]) -> list[Point]:
    """The points, oldest first, each with its change against the one of its mode before (the
    last that gameday carried out and judged: an error or an inconclusive run aside)."""
    points = sorted(points, key=lambda p: (p.started_at, p.run_id))
    out: list[Point] = []
    last: dict[RunMode, Point] = {}
    for cur in points:
        prev = last.get(cur.mode)
        # a run gameday could not carry out (an error, an interrupted run) measured nothing, and
        # an inconclusive one was not judged: neither is the run the next one is compared with
        if cur.verdict is Verdict.ERROR:
            out.append(cur)
            continue
        unjudged = cur.verdict is Verdict.INCONCLUSIVE
        if not unjudged:
            last[cur.mode] = cur
        if prev is None:
            out.append(cur)
            continue
        change = {m: _change(getattr(prev, m.value), getattr(cur, m.value)) for m in Measure}
        out.append(
            cur.model_copy(
                update={
                    "change_s": change,
                    "recover_regressed": not unjudged
                    and regressed(prev.time_to_recover_s, cur.time_to_recover_s),
                }
            )
        )
    return out


def _change(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def regressed(before: float | None, after: float | None) -> bool:
    """Time to recover got worse: slower than REGRESSION_RATIO times before, or not recovered
    where it was."""
    if before is None:
        return False
    return after is None or after > before * REGRESSION_RATIO
