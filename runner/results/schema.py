"""What a run found, as data. Documented in docs/reports.md 'result.json'.

A verdict is one of passed / failed / inconclusive / error / skipped. `error` means gameday could
not tell (the lab misbehaved, a probe could not be made, the baseline was not steady): it is never
reported as a pass or a fail of the scenario's assertions. `inconclusive` means a timed window was
missed only by as much as the machine's CPUs were contended while it was measured
(runner/run/load.py): the machine was too loaded to judge.
"""

from __future__ import annotations

import enum
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from runner.errors import InputError, plain_message
from runner.fsutil import read_bytes
from runner.results.drill_record import HintView, ObservedAction


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Verdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    INCONCLUSIVE = "inconclusive"  # a window missed only by the machine's load


def combine(verdicts: list[Verdict]) -> Verdict:
    """The worst of the verdicts, skipped ones aside: error, then failed, then inconclusive
    (a failure elsewhere is still a failure; an assertion the load kept from being judged keeps
    the whole from being a pass), then passed."""
    vs = [v for v in verdicts if v is not Verdict.SKIPPED]
    if not vs:
        return Verdict.SKIPPED
    for worst in (Verdict.ERROR, Verdict.FAILED, Verdict.INCONCLUSIVE):
        if worst in vs:
            return worst
    return Verdict.PASSED


class Phase(enum.StrEnum):
    """The phase of a run an assertion belongs to (`run`: the run as a whole)."""

    RUN = "run"
    BASELINE = "baseline"
    INJECT = "inject"
    EXPECT = "expect"
    DETECT = "detect"
    RECOVER = "recover"
    VERIFY = "verify"
    CLEANUP = "cleanup"


class PartDeath(Frozen):
    """A part a lab starts beside the engines (Prometheus, Alertmanager, an exporter, a
    monitoring pod), or the runner's alert receiver, that exited or crash-loops: what a person
    needs to know why, without opening the lab. `last_lines` are what it printed last, redacted
    where they were read (runner.labs.base.last_lines). A failed step's `died` in result.json."""

    part: str  # "Prometheus", "node-exporter of node serving", "Prometheus pod prometheus-0"
    exit_code: int | None = None  # its last exit status (None: not known, or never started)
    reason: str = ""  # a pod's waiting reason (CrashLoopBackOff), or a container's state
    restarts: int = 0  # how often the runtime has started it again
    last_lines: tuple[str, ...] = ()
    log: str = ""  # where its whole output is: a file, or the command that shows it

    def summary(self) -> str:
        """One sentence: the part, how it died, and the last line it printed."""
        how = []
        if self.exit_code is not None:
            how.append(f"exited with status {self.exit_code}")
        if self.reason:
            how.append(self.reason)
        if self.restarts:
            how.append(f"restarted {self.restarts} time{'s' if self.restarts != 1 else ''}")
        text = f"{self.part} died: " + (", ".join(how) if how else "it stopped")
        if self.last_lines:
            return f"{text}; its last line: {self.last_lines[-1]}"
        return f"{text}; it printed nothing"


class Assertion(Frozen):
    name: str
    phase: Phase
    verdict: Verdict
    expected: str
    observed: str
    detail: str = ""
    # the part of the lab whose death ended this step (left out of result.json when none)
    died: PartDeath | None = None

    @model_serializer(mode="wrap")
    def _deaths_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.died is None:
            data.pop("died", None)
        return data

    @field_validator("phase", mode="before")
    @classmethod
    def _labelled(cls, v: object) -> object:
        """Results written before phases were a closed set name a step's label as its phase
        ("recover 2: restart the head", "expect on worker1"): its first word is the phase."""
        if isinstance(v, str) and v not in Phase.__members__.values():
            return v.split(" ", 1)[0].rstrip(":")
        return v


class EventKind(enum.StrEnum):
    """What a timeline event is, for the report's picture (its text says it to a person)."""

    PHASE = "phase"  # a phase of the run began
    SETUP = "setup"  # the baseline's setup changed the lab (before the baseline probes)
    INJECT = "inject"  # the fault, or part of it, was put in place
    FAIL = "fail"  # the failure was observed
    ALERT = "alert"  # an expected alert fired
    RESTORED = "restored"  # the service was verified again
    STARTED = "started"  # a node's engine started (an incarnation)
    EXITED = "exited"  # a node's engine exited (crashed, or stopped by the lab)
    FIRST_OUTPUT = "first_output"
    READY = "ready"
    UNREADY = "unready"
    BACKOFF = "backoff"  # the runtime waits before the next start
    APPLIED = "applied"  # a node's configuration was applied
    PROCESS = "process"  # a process beside the engine started or stopped
    STEP = "step"  # a recovery or cleanup step did something
    LOG = "log"  # a log line a signature matched
    NOTE = "note"


_TEXT_KINDS: tuple[tuple[str, EventKind], ...] = (
    (r"phase \w", EventKind.PHASE),
    (r"setup: ", EventKind.SETUP),
    (r"inject: ", EventKind.INJECT),
    (r"failure observed", EventKind.FAIL),
    (r"alert \S+ firing", EventKind.ALERT),
    (r"service verified", EventKind.RESTORED),
    (r"started incarnation", EventKind.STARTED),
    (r"exited with code|stopped by the lab", EventKind.EXITED),
    (r"first_output$", EventKind.FIRST_OUTPUT),
    (r"ready$", EventKind.READY),
    (r"unready$", EventKind.UNREADY),
    (r"back-off ", EventKind.BACKOFF),
    (r"applied$", EventKind.APPLIED),
    (r"aux_(started|stopped)$", EventKind.PROCESS),
    (r"log: ", EventKind.LOG),
    (r"(recover \d+|cleanup|drill): ", EventKind.STEP),
)


class TimelineEvent(Frozen):
    ts: datetime  # UTC
    source: str  # runner | lab:<node> | log:<node> | prometheus | ansible
    clock: str  # whose clock stamped it
    event: str
    # results written before these were recorded derive them from `event` and `source`
    kind: EventKind | None = None
    node: str | None = None  # the node it happened to, where known

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        text, source = str(data.get("event", "")), str(data.get("source", ""))
        if data.get("kind") is None:
            kind = next((k for rx, k in _TEXT_KINDS if re.match(rx, text)), EventKind.NOTE)
            data = {**data, "kind": kind}
        if data.get("node") is None and source.startswith(("lab:", "log:")):
            data = {**data, "node": source.split(":", 1)[1]}
        return data


MAX_EVIDENCE_LINE = 4000  # characters of one log line kept as evidence


def truncate(text: str, limit: int = MAX_EVIDENCE_LINE) -> str:
    """`text` in at most `limit` characters, saying how much was cut (the result is short
    enough to pass through again unchanged)."""
    if len(text) <= limit:
        return text
    keep = limit - 40  # room for the marker
    return f"{text[:keep]}… [truncated {len(text) - keep} chars]"


class EvidenceLine(Frozen):
    ts: datetime | None
    text: str
    highlight: bool = False

    @field_validator("text")
    @classmethod
    def _bounded(cls, v: str) -> str:
        return truncate(v)


class Evidence(Frozen):
    title: str
    lines: list[EvidenceLine]


class DrillOutcome(enum.StrEnum):
    RECOVERED = "recovered"  # the verify probes passed
    TIMED_OUT = "timed_out"  # --timeout passed first
    GAVE_UP = "gave_up"  # Ctrl-C, `gameday drill stop`, the page's give-up
    ERROR = "error"  # gameday could not carry the drill (no hand-over, a lab error)


class DrillRecord(Frozen):
    """What a drill measured of the people (`gameday drill`). Every time is wall-clock seconds
    since the fault was in place: people act in wall time, whatever the lab's time scale. The
    windows are the scenario's, real-world. The time to detect (the first expected alert firing)
    is the system's, counted on the lab's scaled clock: it meets its window converted by
    `time_scale`. The people's times meet theirs as they are: a person's wall second is a
    real-world second (runner.results.durations)."""

    handed_over_at: datetime | None
    # the fault in place: the zero of every time here (the report's picture places them by it)
    fault_at: datetime | None = None
    time_to_detect_s: float | None = None  # the first expected alert firing
    time_to_acknowledge_s: float | None = None
    time_to_recover_s: float | None = None
    hints: list[HintView] = []
    actions: list[ObservedAction] = []
    shortcuts: list[ObservedAction] = []
    # restarts and changes no person made (a restart policy's, gameday's own), with who made
    # them: recorded, never scored
    not_people: list[ObservedAction] = []
    outcome: DrillOutcome
    # the scenario's windows, real-world seconds: the first expected alert's, time to recover's
    detect_within_s: float | None = None
    recover_within_s: float | None = None
    # the lab's: one wall second is this many real-world seconds of the lab's (the system's) clock
    time_scale: float = 1.0


class Interruption(enum.StrEnum):
    """What stopped a run before its end."""

    SIGINT = "SIGINT"  # Ctrl-C
    SIGTERM = "SIGTERM"  # a CI job cancelled, `kill`


class RunMode(enum.StrEnum):
    RUN = "run"  # gameday runs the recovery
    DRILL = "drill"  # people recover the lab; gameday watches
    SEAT = "seat"  # a drill on a workshop's seat (`gameday drill --seat`): an attendee's


class PhaseFigures(Frozen):
    """What the load's users felt in one phase (runner.spec.workload): requests counted by their
    intended send time; latencies in wall milliseconds of the requests that succeeded, from the
    intended send time (open loop) or the send (closed loop)."""

    phase: str  # baseline, inject, fault, recover, verify
    sent: int
    failed: int
    error_rate: float | None  # None: no request in the phase
    p50_ms: float | None = None
    p99_ms: float | None = None
    ttft_p50_ms: float | None = None  # streamed requests only
    ttft_p99_ms: float | None = None
    outcomes: dict[str, int] = {}  # outcome -> count (ok, http_error, refused, ...)


class LoadBin(Frozen):
    """The requests sent in one stretch of wall time (by intended send time, as the phases
    count them): how each came out, and the latency of those that succeeded."""

    start: datetime
    wall_s: float
    outcomes: dict[str, int]  # outcome -> count
    p50_ms: float | None = None
    p99_ms: float | None = None


class ImpactFigures(Frozen):
    """The load's figures: per phase, and when users saw the fault first and last, in
    real-world seconds (the lab's time scale applied)."""

    mode: str  # open (a rate) or closed (a concurrency)
    rate: float | None = None
    concurrency: int | None = None
    load_scale: float = 1.0  # the lab's share of the scenario's load; rate and concurrency are sent
    node: str
    phases: list[PhaseFigures]
    users_saw_first_s: float | None = None  # the fault in place -> the first failed answer
    users_saw_last_s: float | None = None  # restoring step -> the last failure past baseline
    unfinished: int = 0  # in flight when the load stopped, cut off
    bins: list[LoadBin] = []  # the requests over time, for the report's picture


class ScenarioResult(Frozen):
    id: str
    title: str
    file: str
    lab: str
    verdict: Verdict
    time_to_fail_s: float | None
    time_to_recover_s: float | None
    time_to_detect_s: float | None = None
    started_at: datetime
    finished_at: datetime
    assertions: list[Assertion]
    timeline: list[TimelineEvent]
    evidence: list[Evidence]
    notes: list[str]
    # a recovery step's `runbook:` (a URL, or a path relative to the repository:
    # runner.results.repopaths), by the step's label ("recover 2: scale the KV cache")
    runbooks: dict[str, str] = {}
    drill: DrillRecord | None = None  # in a drill: what the people did, and when
    impact: ImpactFigures | None = None  # the scenario's load: what its users felt

    @model_serializer(mode="wrap")
    def _measured_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No alert expected or none fired: `time_to_detect_s` is left out, not null, so that a
        reader tells "not measured" by its absence (results that wrote null still load)."""
        data: dict[str, Any] = handler(self)
        if self.time_to_detect_s is None:
            data.pop("time_to_detect_s", None)
        if self.impact is None:
            data.pop("impact", None)
        return data


class LabInfo(Frozen):
    name: str
    kind: str
    inventory: str
    time_scale: float
    timing_allowance_s: float
    instances: int = 1  # `--parallel N`: isolated instances of the lab the scenarios ran on


class RunResult(Frozen):
    schema_version: int = 1
    run_id: str
    gameday_version: str
    started_at: datetime
    finished_at: datetime
    lab: LabInfo
    verdict: Verdict
    scenarios: list[ScenarioResult]
    mode: RunMode = RunMode.RUN
    # the signal that stopped the run (left out of result.json when it ran to its end): the
    # scenario under way is an error, those not started are skipped
    interrupted: Interruption | None = None

    @model_serializer(mode="wrap")
    def _finished_runs_unmarked(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.interrupted is None:
            data.pop("interrupted", None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _older(cls, data: object) -> object:
        """Results written before these were recorded: one that holds a drill's record is a
        drill's (seats were not told apart); a drill's record without `time_scale` kept its
        scenario's times to detect and recover in wall seconds: its time to detect (the
        system's) is converted by the lab's scale to the real-world seconds the field holds, its
        time to recover (the people's) stays wall seconds."""
        if not isinstance(data, dict):
            return data
        scenarios = data.get("scenarios")
        if not isinstance(scenarios, list):
            return data
        drilled = [s for s in scenarios if isinstance(s, dict) and isinstance(s.get("drill"), dict)]
        if drilled and "mode" not in data:
            data = {**data, "mode": RunMode.DRILL.value}
        lab = data.get("lab")
        scale = lab.get("time_scale") if isinstance(lab, dict) else None
        if not isinstance(scale, int | float) or not any(
            "time_scale" not in s["drill"] for s in drilled
        ):
            return data
        return {**data, "scenarios": [_with_scale(s, float(scale)) for s in scenarios]}


def _with_scale(s: object, scale: float) -> object:
    """An older drill's scenario (see RunResult._older): its drill's scale recorded, its time
    to detect real-world."""
    if not isinstance(s, dict) or not isinstance(s.get("drill"), dict):
        return s
    if "time_scale" in s["drill"]:
        return s
    detect = s.get("time_to_detect_s")
    times = {"time_to_detect_s": detect * scale} if isinstance(detect, int | float) else {}
    return {**s, **times, "drill": {**s["drill"], "time_scale": scale}}


MAX_RESULT_BYTES = 256 * 1024 * 1024


def load_result(path: Path) -> RunResult:
    """A result.json, or InputError naming the file (and the field at fault)."""
    raw = read_bytes(path, MAX_RESULT_BYTES, InputError, "result")
    hint = "give a run directory or its result.json (reports/<run-id>/)"
    try:
        data = json.loads(raw)
    except RecursionError:
        raise InputError("not a gameday result: nested too deeply", file=path, hint=hint) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit number
        raise InputError(f"not a gameday result: {exc}", file=path, hint=hint) from None
    try:
        return RunResult.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(
            f"not a gameday result: {plain_message(err)}",
            file=path,
            field=".".join(map(str, err["loc"])) or None,
            hint=hint,
        ) from None
