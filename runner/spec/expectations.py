"""Expectations in the scenario format: the failure signature (ordered patterns with checked
captures, absent patterns), exit code, state, phase and time to fail; the alerts that must
fire; the recovery steps and what each must show.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from runner.spec.actions import Action
from runner.spec.kinds import (
    MAX_PATTERN,
    MAX_WINDOW_S,
    LogSource,
    Model,
    NodeStatus,
    Outcome,
    Window,
)
from runner.spec.patterns import compile_user
from runner.spec.probes import Probe, safe_regex
from runner.spec.usersteps import Command, Http, Playbook
from vllmfacts.startup import StartupPhase

# ---- expectations ------------------------------------------------------------------------------

Comparable = float | int | str


class CaptureCheck(Model):
    """Checks on a captured value. A string value `{name}` refers to another capture."""

    eq: Comparable | None = None
    ne: Comparable | None = None
    lt: Comparable | None = None
    le: Comparable | None = None
    gt: Comparable | None = None
    ge: Comparable | None = None
    in_: list[Comparable] | None = Field(default=None, alias="in")

    @model_validator(mode="after")
    def _some(self) -> CaptureCheck:
        if all(v is None for v in self.model_dump().values()):
            raise ValueError("a capture check needs at least one of eq, ne, lt, le, gt, ge, in")
        return self


class Pattern(Model):
    regex: Annotated[str, Field(min_length=1, max_length=MAX_PATTERN)]
    description: str = ""
    captures: dict[str, CaptureCheck] = {}
    identifies: bool = Field(
        default=False,
        description="This pattern alone names the failure: `gameday triage` recognises the "
        "scenario in a captured log when all its identifying patterns match.",
    )
    raised_in: list[Annotated[str, Field(pattern=r"^[\w./-]+\.py [\w<>.]+$")]] = Field(
        default=[],
        description="Where vLLM raises this message (`vllm/envs.py get_vllm_port`: the file "
        "and function a traceback's frame names): `gameday triage` recognises a paste whose "
        "traceback ends at that frame's source line, the message cut off.",
    )

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        return safe_regex(v)

    @model_validator(mode="after")
    def _groups_exist(self) -> Pattern:
        groups = set(compile_user(self.regex).groupindex)
        for name, check in self.captures.items():
            if name not in groups:
                raise ValueError(
                    f"capture {name!r} is not a named group (?P<{name}>...) of the "
                    f"regex; its groups are {sorted(groups) or 'none'}"
                )
            for v in check.model_dump(by_alias=True).values():
                refs = [v] if not isinstance(v, list) else v
                for r in refs:
                    if (
                        isinstance(r, str)
                        and r.startswith("{")
                        and r.endswith("}")
                        and r[1:-1] not in groups
                    ):
                        raise ValueError(
                            f"check on {name!r} refers to {r} which is not a named group"
                        )
        return self


class Signature(Model):
    """Patterns that must appear in this order in the failed incarnation's log, and patterns
    that must not appear at all (e.g. no EngineCore line: it died before the engine started)."""

    source: LogSource = LogSource.PREVIOUS
    in_order: Annotated[list[Pattern], Field(min_length=1)]
    absent: list[Pattern] = []


class StateExpectation(Model):
    status: NodeStatus
    min_restarts: Annotated[int, Field(ge=0, le=20)] = 0
    max_restarts: Annotated[int | None, Field(ge=0)] = Field(
        default=None, description="e.g. 0: the restart policy did NOT restart it."
    )


class FailureMode(enum.StrEnum):
    EXIT = "exit"  # the target's process exits (with any code)
    # nothing exits and the target logs nothing: the expectation's probes show it (and other
    # nodes' lines in `elsewhere`, from the injection on, may say why)
    SILENT = "silent"


class NodeSignature(Model):
    """Lines another node must log after the failure, within `within_s` real-world seconds."""

    node: str
    view: str = Field(
        default="a worker's",
        description="Whose log this is, as `gameday triage` names it in a finding, for "
        "instance: the decode engine's.",
    )
    source: LogSource = LogSource.CURRENT
    in_order: Annotated[list[Pattern], Field(min_length=1)]
    within_s: Annotated[float, Field(gt=0, le=MAX_WINDOW_S)]


class TextCheck(enum.Enum):
    """An answer's text that is no language, read by `gameday triage` (runner.triage.garbled)."""

    # words of four or more writing systems switching word by word in one stretch of a line
    MIXED_SCRIPTS = "mixed_scripts"
    # one word six or more times in a row, or one short token glued to itself ten or more times
    REPEATED_WORD = "repeated_word"


class TriageSignature(Model):
    """The same fault as a log outside the scenario's own run shows it, read by `gameday triage`
    only (a run never checks it): another moment of the fault, such as the engine started with
    the cause already there, or a paste that holds only part of what the run's signature
    quotes."""

    when: Annotated[str, Field(min_length=1, max_length=200)] = Field(
        description="When a log shows these lines, as the finding says it (for instance: at "
        "start-up, the stranger already on the GPU)."
    )
    note: Annotated[str, Field(min_length=1, max_length=4000)] = Field(
        description="What vLLM prints here and where in its source (file, function, the "
        "releases read), since a signature no run checks is a claim a reader must be able to "
        "check."
    )
    view: str = Field(
        default="the serving node's",
        description="Whose log this is, as `gameday triage` names it in a finding.",
    )
    node: str | None = Field(
        default=None,
        description="The scenario's node whose log this is (default: the target), where the "
        "lines are another node's, such as the prefill engine of a proxy's scenario.",
    )
    in_order: list[Pattern] = Field(
        default=[],
        description="The lines, in order; or `stalled_stats`, `text_check` or `held_by_others` "
        "instead.",
    )
    stalled_stats: Annotated[int | None, Field(ge=2, le=100)] = Field(
        default=None,
        description="Instead of patterns: at least this many consecutive periodic stats lines "
        "of one engine (`Avg prompt throughput: ...`) with requests running, no token made and "
        "the scheduler's figures unchanged (runner.triage.stall).",
    )
    text_check: TextCheck | None = Field(
        default=None,
        description="Instead of patterns: a model's answer whose text is no language "
        "(`mixed_scripts`: token soup; `repeated_word`: one word over and over), as "
        "runner.triage.garbled reads it.",
    )
    held_by_others: bool = Field(
        default=False,
        description="Instead of patterns: PyTorch's CUDA out-of-memory error whose own list of "
        "the GPU's processes shows processes other than the failing one holding a quarter of "
        "the GPU or more (runner.triage.oom).",
    )
    recover: list[Annotated[str, Field(min_length=1, max_length=600)]] = Field(
        default=[],
        description="What brings service back where these lines are seen, shown by the finding "
        "in place of the scenario's recovery steps: for lines of the same failure from a cause "
        "other than the one the scenario's run injects (its model, its build).",
    )
    shortcuts: list[Annotated[str, Field(min_length=1, max_length=600)]] = Field(
        default=[],
        description="With `recover`: what seems to fix it and does not, and why, in place of the "
        "scenario's shortcuts.",
    )
    cut_before: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        default=None,
        description="What the fault logs before these lines, which the run's signature quotes "
        "and these do not (for instance: the driver's Xid line): a paste that shows these and "
        "not the run's signature is cut before it, and the finding says so in these words.",
    )
    ended_by: Pattern | None = Field(
        default=None,
        description="A line that shows the wait these lines report ended by itself (for "
        "instance: start-up finished after a long compilation): where one follows the last "
        "match of these lines, the paste shows no failure of this kind.",
    )
    stopped_by: Pattern | None = Field(
        default=None,
        description="A line that shows the process was told to stop (a signal received, a "
        "shutdown begun): where the last one before these lines' first match has no server "
        'start after it (uvicorn\'s "Application startup complete"), the lines are what the '
        "stop did, not a failure, and a later match is looked for instead.",
    )
    only_with: Pattern | None = Field(
        default=None,
        description="A line the log must also show, anywhere, for these lines to count: where "
        "the same lines are printed where nothing failed too (the engine core's death line at "
        "an offline script's exit), what makes them a failure (the API server's own lines).",
    )
    not_with: Pattern | None = Field(
        default=None,
        description="A line which, anywhere in the log, shows these lines are not this "
        "failure's: where the same lines follow more than one cause (PyTorch's NCCL watchdog "
        "taking a process down after a collective's timeout or after an NCCL error), the "
        "other cause's own words; where they are printed in another phase or run than the "
        "one this entry reads (SGLang's start-up, a test run's failure), that phase's or "
        "run's lines.",
    )
    names_cause: bool = Field(
        default=False,
        description="These lines name a cause of the run's own failure lines other than the "
        "scenario's (the same handshake refused for a configuration that differs, not for an "
        "address): they are read where the run's signature matches too, and the finding shows "
        "this entry's `recover` and `shortcuts` in place of the scenario's.",
    )
    after_cause: bool = Field(
        default=False,
        description="These lines are a death another failure may have caused (a process that "
        "aborted, a server that crashed): where the paste shows another known failure later in "
        "the same run, `gameday triage` lists that one first. `cut_before_cause` entries are "
        "read so too.",
    )
    cut_before_cause: bool = Field(
        default=False,
        description="vLLM logs the failure's root cause with these lines (a traceback that "
        "ends in its exception): a paste that shows no exception but the engine's own death "
        "wrappers is cut before the cause, and the finding says so.",
    )

    def _shapes_reading(self) -> bool:
        """Whether a field that shapes how a log's lines are read is set: an entry that reads
        an answer or one message whole, or that explains others' lines, takes none of them."""
        return (
            self.ended_by is not None
            or self.stopped_by is not None
            or self.cut_before is not None
            or self.cut_before_cause
        )

    @model_validator(mode="after")
    def _one_kind(self) -> TriageSignature:
        kinds = [
            bool(self.in_order),
            self.stalled_stats is not None,
            self.text_check is not None,
            self.held_by_others,
        ]
        if sum(kinds) != 1:
            raise ValueError(
                "a triage entry has one of in_order, stalled_stats, text_check or held_by_others"
            )
        if self.shortcuts and not self.recover:
            raise ValueError("a triage entry's shortcuts need its recover steps")
        if self.names_cause and (not self.in_order or not self.recover):
            raise ValueError(
                "a names_cause entry names its cause by in_order patterns and brings the "
                "recover steps for it"
            )
        if self.names_cause and (self._shapes_reading() or self.after_cause):
            raise ValueError(
                "a names_cause entry is read beside the lines it explains, in their run: "
                "ended_by, stopped_by, cut_before, cut_before_cause and after_cause do not "
                "apply to it"
            )
        if self.text_check is not None and self._shapes_reading():
            raise ValueError(
                "a text_check entry reads an answer, not a log: ended_by, stopped_by, "
                "cut_before and cut_before_cause do not apply to it"
            )
        if self.held_by_others and self._shapes_reading():
            raise ValueError(
                "a held_by_others entry reads one message whole: ended_by, stopped_by, "
                "cut_before and cut_before_cause do not apply to it"
            )
        return self


class Expectation(Model):
    failure: FailureMode = FailureMode.EXIT
    signature: Signature | None = None
    exit_code: int | None = None
    state: StateExpectation | None = None
    phase: StartupPhase | None = None
    probes: list[Probe] = Field(
        default=[],
        description="Checked once the failure shows (for `silent`: they are how it "
        "shows, polled until they all pass within time_to_fail).",
    )
    elsewhere: list[NodeSignature] = []
    time_to_fail: Window

    @model_validator(mode="after")
    def _mode(self) -> Expectation:
        if self.failure is FailureMode.EXIT and self.signature is None:
            raise ValueError("an `exit` failure needs a signature")
        if self.failure is FailureMode.SILENT and not self.probes:
            raise ValueError("a `silent` failure needs probes that show it")
        return self


class AlertExpectation(Model):
    name: str
    within_s: Annotated[float, Field(gt=0, le=MAX_WINDOW_S)]
    labels: dict[str, str] = {}
    delivered: bool = Field(
        default=False,
        description="The alert also reaches the runner's webhook receiver through the lab's "
        "Alertmanager, firing, within delivered_within_s of the injection.",
    )
    delivered_within_s: Annotated[float | None, Field(gt=0, le=MAX_WINDOW_S)] = Field(
        default=None, description="Real-world seconds from the injection; default within_s."
    )
    annotations: dict[str, str] = Field(
        default={},
        description="Text each delivered annotation must contain (annotation name -> text).",
    )

    @model_validator(mode="after")
    def _delivery(self) -> AlertExpectation:
        if not self.delivered and (self.annotations or self.delivered_within_s is not None):
            raise ValueError("annotations and delivered_within_s need delivered: true")
        return self

    @property
    def delivery_window_s(self) -> float:
        return self.delivered_within_s if self.delivered_within_s is not None else self.within_s


class Detection(Model):
    alerts: list[AlertExpectation] = []


class StepSignature(Model):
    """What a failing step must show (e.g. a shortcut that fails further along)."""

    source: LogSource = LogSource.PREVIOUS
    in_order: Annotated[list[Pattern], Field(min_length=1)]


class RecoveryStep(Model):
    name: str
    outcome: Outcome
    why: str = ""
    forbidden: str | None = Field(
        default=None,
        description="Why this step must never be used in production even where it seems to work.",
    )
    actions: Annotated[list[Action], Field(min_length=1)]
    expect: StepSignature | None = None
    settle_s: Annotated[float | None, Field(gt=0, le=MAX_WINDOW_S)] = Field(
        default=None,
        description="Real-world seconds to let a does_not_restore step play out before probing "
        "(default: verify.time_to_recover.max_s). Bounds the wait when the step "
        "hangs instead of failing.",
    )
    runbook: str | None = Field(
        default=None,
        description="The runbook section this step exercises: a path relative to the scenario's "
        "folder, or an http(s) URL. Shown in the reports.",
    )

    reveal: list[Action] = Field(
        default=[],
        description="For a step that `masks`: the actions that put the original setting back, "
        "after which the expectation's probes must show the fault again.",
    )

    @model_validator(mode="after")
    def _masks_reveal(self) -> RecoveryStep:
        if (self.outcome is Outcome.MASKS) != bool(self.reveal):
            raise ValueError("reveal: is what a step that `masks` needs, and only such a step")
        return self

    @model_validator(mode="after")
    def _no_undo(self) -> RecoveryStep:
        for a in self.actions:
            if isinstance(a, Command | Playbook | Http) and a.undo is not None:
                raise ValueError(
                    "undo: belongs on an injected step; cleanup undoes a recovery step's changes "
                    "and re-applies the baseline after a user step"
                )
        return self
