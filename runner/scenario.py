"""The scenario format (`apiVersion: gameday/v1`, `kind: Scenario`).

A scenario says: on these labs, with service at baseline (after an optional setup), inject this;
expect this failure signature, exit code, state and phase within this time; expect these alerts;
then walk these recovery steps (each expected to restore service, or expected NOT to: the tempting
shortcut) and verify service is back, health *and* a real inference, within this time.

Windows are in real-world seconds: what the failure takes on real GPUs. A lab that runs faster
converts them with its time scale (see runner.timing).

`gameday schema` exports these models as JSON Schema for editors.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pydantic
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from labengine.wording import Era
from runner.errors import ScenarioError
from runner.patterns import compile_user
from runner.usersteps import USER_STEP_KINDS, Command, Http, Playbook, check_files
from runner.yamlsrc import load, register_union_tags

API_VERSION = "gameday/v1"
MAX_PATTERN = 2000


class Model(BaseModel):
    # no infinite or NaN number anywhere: a window of .inf would make a run wait forever
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


class LabKind(enum.StrEnum):
    LOCAL = "local"
    COMPOSE = "compose"
    KUBERNETES = "kubernetes"


class NodeStatus(enum.StrEnum):
    """Closed set of node states every lab maps its own onto."""

    PENDING = "pending"
    RUNNING = "running"
    EXITED = "exited"
    CRASH_LOOPING = "crash_looping"  # waiting to restart after failures (CrashLoopBackOff)


class StartupPhase(enum.StrEnum):
    """vLLM's start-up phases, in order (see runner.startup for how logs reveal them)."""

    CONFIG_VALIDATION = "config_validation"
    ENGINE_CORE_INIT = "engine_core_init"
    WEIGHTS_LOAD = "weights_load"
    KV_CACHE_CHECK = "kv_cache_check"
    CUDA_GRAPHS = "cuda_graphs"
    SERVING = "serving"


class LogSource(enum.StrEnum):
    CURRENT = "current"  # the incarnation running now
    PREVIOUS = "previous"  # the last one that exited: `kubectl logs --previous`


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"


class Outcome(enum.StrEnum):
    RESTORES = "restores"
    DOES_NOT_RESTORE = "does_not_restore"
    MASKS = "masks"  # the probes pass after it, yet the fault is back once it is undone


class Metadata(Model):
    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{1,62}$")]
    title: str
    description: str = ""
    tags: list[str] = []
    sources: list[str] = []


# ---- probes ----------------------------------------------------------------------------------


class HttpProbe(Model):
    """GET a path on the target's API; pass on the expected status."""

    kind: Literal["http"]
    node: str | None = None  # default: the scenario's target
    path: Annotated[str, Field(pattern=r"^/")]
    expect_status: int = 200
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 5.0


class InferenceProbe(Model):
    """A real generation request (the *inference probe*): /health can be 200 while nothing
    completes."""

    kind: Literal["inference"]
    node: str | None = None
    expect: Literal["completes", "hangs", "refused", "unavailable"] = Field(
        default="completes",
        description="`hangs`: the request must neither complete nor fail before the timeout "
        "(e.g. /health 200 while a tensor-parallel peer is stuck). `refused`: the server must "
        "answer with an error status (`expect_status` when given), e.g. 503 from a paused "
        "engine. `unavailable`: it must not complete, however it fails (nothing listening, "
        "a hang, an error status): serving is down.",
    )
    expect_status: Annotated[int, Field(ge=400, le=599)] | None = Field(
        default=None, description="With `expect: refused`: the error status it must answer."
    )
    api: Literal["chat", "completions"] = "chat"
    prompt: str
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 16
    temperature: float = 0.0
    expect_finish_reason: FinishReason | None = FinishReason.STOP
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0

    @model_validator(mode="after")
    def _status_with_refused(self) -> InferenceProbe:
        if self.expect_status is not None and self.expect != "refused":
            raise ValueError("expect_status goes with `expect: refused`")
        return self


def safe_regex(v: str) -> str:
    """A regex from a scenario: it must compile on RE2, the linear-time engine it runs on."""
    compile_user(v)
    return v


class TargetsProbe(Model):
    """Prometheus's view of a scrape job: which nodes' targets are up and which are down."""

    kind: Literal["targets"]
    job: str
    up: list[str] = []
    down: list[str] = []


class PromQLProbe(Model):
    """An instant PromQL query; its first value compared with `value` (no data: fails, unless
    `no_data: pass`). E.g. `count(up{job="node-exporter"} == 1)` is the dashboard's gauge count."""

    kind: Literal["promql"]
    query: Annotated[str, Field(min_length=1, max_length=2000)]
    op: Literal["eq", "ne", "lt", "le", "gt", "ge"] = "gt"
    value: float = 0.0
    no_data: Literal["fail", "pass"] = "fail"


class GpuProcessMatch(Model):
    name: Annotated[str, Field(min_length=1, max_length=MAX_PATTERN)]  # a regex on the name
    min_mib: int | None = None
    max_mib: int | None = None

    @field_validator("name")
    @classmethod
    def _compiles(cls, v: str) -> str:
        return safe_regex(v)


class GpuProcessesProbe(Model):
    """The node's GPU process list (nvidia-smi): who holds GPU memory."""

    kind: Literal["gpu_processes"]
    node: str
    present: list[GpuProcessMatch] = []
    only: bool = Field(default=False, description="No process other than `present` ones.")


class NodeStateProbe(Model):
    """A node's state: e.g. still running (workers 'Up' while useless), or exited with code 0
    and not restarted by its restart policy."""

    kind: Literal["node_state"]
    node: str
    status: NodeStatus
    exit_code: int | None = None
    max_restarts: int | None = None


class LogSilenceProbe(Model):
    """Nothing matching `regex` was logged on these nodes since the injection."""

    kind: Literal["log_silence"]
    nodes: Annotated[list[str], Field(min_length=1)]
    regex: str = r"ERROR|Traceback|Exception|CRITICAL"

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str) -> str:
        return safe_regex(v)


KNOWN_ANSWER_PROMPTS = (
    "What is the capital of France? Answer in one word.",
    "Count from one to five.",
    "Name the largest planet of the solar system.",
    "Spell the word 'engine' backwards.",
)


class CorrectnessProbe(Model):
    """Known-answer prompts at temperature 0 under concurrent load, each answer (and its
    per-token logprobs) compared with a reference: the same prompts sent one at a time, recorded
    by the baseline's correctness probe where it has one (runner.correctness)."""

    kind: Literal["correctness"]
    node: str | None = None
    prompts: Annotated[list[str], Field(min_length=1)] = list(KNOWN_ANSWER_PROMPTS)
    requests: Annotated[int, Field(ge=1, le=20000)] = 256
    concurrency: Annotated[int, Field(ge=1, le=64)] = 16
    max_tokens: Annotated[int, Field(ge=1, le=256)] = 16
    logprob_tolerance: Annotated[float, Field(ge=0)] = 1e-3
    expect: Literal["matches", "diverges"] = "matches"
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 60.0


AnyProbe = (
    CorrectnessProbe
    | HttpProbe
    | InferenceProbe
    | TargetsProbe
    | PromQLProbe
    | GpuProcessesProbe
    | NodeStateProbe
    | LogSilenceProbe
)
Probe = Annotated[AnyProbe, Field(discriminator="kind")]


# ---- actions (injection and recovery) ----------------------------------------------------------

ArgValue = str | int | float | bool | None


MODEL_TAG = "model_tag"  # `vllm serve MODEL`'s positional argument, by vLLM's own name for it


class SetArgs(Model):
    """Change engine flags, as editing the Deployment's args and re-applying does. A value of
    `true` is a bare flag; `null` removes the flag. The key `model_tag` is the positional model
    (`vllm serve MODEL`), which wins over `--model`."""

    kind: Literal["set_args"]
    node: str = "serving"
    args: dict[
        Annotated[str, Field(pattern=rf"^(--?[A-Za-z0-9][A-Za-z0-9_-]*|{MODEL_TAG})$")], ArgValue
    ]


class SetEnv(Model):
    """Change the engine's environment (`null` unsets), then re-apply."""

    kind: Literal["set_env"]
    node: str = "serving"
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str | None]


class ServiceLinks(Model):
    """A Service named `service` next to the pod, with the pod's `enableServiceLinks`. On
    Kubernetes this is the real mechanism; other labs inject the variables Kubernetes would."""

    kind: Literal["service_links"]
    node: str = "serving"
    service: Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")] = "vllm"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    enabled: bool


class Restart(Model):
    """Restart nodes (all of them at once when `together`)."""

    kind: Literal["restart"]
    nodes: list[str] = ["serving"]
    together: bool = True


class Rollback(Model):
    """Put back everything this run changed: re-apply the lab's baseline."""

    kind: Literal["rollback"]


class Wait(Model):
    """Do nothing and watch: what the lab then does by itself (a restart policy, a controller)
    is the step, e.g. the kubelet restarting a head alone. The step's `settle_s` bounds the
    watch."""

    kind: Literal["wait"]
    why: Annotated[str, Field(min_length=1, max_length=500)] = Field(
        description="What the lab does meanwhile, as the report shows it."
    )


class Program(enum.StrEnum):
    """Programs a scenario may start on a node (a closed set: no command lines from scenarios)."""

    STRAY_GPU_PROCESS = "stray_gpu_process"  # seeds/001's OmniParser: ~1.4 GiB GPU, idle


# The process name each program holds GPU memory under (what nvidia-smi lists), given on its
# command line so that the runner knows what to look for.
GPU_PROCESS_NAMES: dict[Program, str] = {Program.STRAY_GPU_PROCESS: "/omniparser/venv/bin/python"}
PROGRAMS: dict[Program, tuple[str, ...]] = {
    Program.STRAY_GPU_PROCESS: (
        "vllm-lab",
        "stray",
        "--name",
        GPU_PROCESS_NAMES[Program.STRAY_GPU_PROCESS],
    )
}


# a process name is a file name on the node (its pid file): no path, nothing a template reads
PROCESS_NAME = r"^[a-z0-9][a-z0-9-]{0,40}$"


class StartProcess(Model):
    """Start a program on a node, beside its engine (a host action)."""

    kind: Literal["start_process"]
    node: str
    name: Annotated[str, Field(pattern=PROCESS_NAME)]
    program: Program
    mib: Annotated[int | None, Field(ge=1, le=1_000_000)] = None


class StopProcess(Model):
    """Stop a program a `start_process` started (its name, as there)."""

    kind: Literal["stop_process"]
    node: str
    name: Annotated[str, Field(pattern=PROCESS_NAME)]


class SignalName(enum.StrEnum):
    KILL = "KILL"
    TERM = "TERM"
    INT = "INT"


class Signal(Model):
    """Send a signal to a node's engine: its main (API-server) process or its engine core."""

    kind: Literal["signal"]
    node: str
    process: Literal["main", "engine_core"] = "main"
    signal: SignalName


class TrafficRequest(Model):
    prompt: str
    max_tokens: Annotated[int, Field(ge=1)] = 16


class Traffic(Model):
    """Send requests as users would; their outcome is not asserted (that is what probes do)."""

    kind: Literal["traffic"]
    node: str | None = None
    requests: Annotated[list[TrafficRequest], Field(min_length=1)]


class ChangeAddress(Model):
    """The node gets a new address on a network (DHCP after re-cabling). Without `address` the
    lab hands out one (the node's host number + 10 on the same network), so one scenario fits
    every lab's address plan."""

    kind: Literal["change_address"]
    node: str
    network: Literal["management"] = "management"
    address: Annotated[str, Field(pattern=r"^\d{1,3}(\.\d{1,3}){3}$")] | None = None


class ScrapeTargets(Model):
    """Point Prometheus's job at the nodes' addresses on this network, and reload it."""

    kind: Literal["scrape_targets"]
    job: str = "node-exporter"
    network: Literal["management", "overlay"]


Action = Annotated[
    SetArgs
    | SetEnv
    | ServiceLinks
    | Restart
    | Rollback
    | Wait
    | StartProcess
    | StopProcess
    | Signal
    | Traffic
    | ChangeAddress
    | ScrapeTargets
    | Command
    | Playbook
    | Http,
    Field(discriminator="kind"),
]
register_union_tags(
    "http",
    "inference",
    "targets",
    "promql",
    "gpu_processes",
    "node_state",
    "log_silence",
    "set_args",
    "set_env",
    "service_links",
    "restart",
    "rollback",
    "wait",
    "start_process",
    "stop_process",
    "signal",
    "traffic",
    "change_address",
    "scrape_targets",
    *USER_STEP_KINDS,
)


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


# The longest window a scenario may state, in real-world seconds: a day. The slowest failure in
# the seeds (a worker's heartbeat noticing a dead head) takes about 2.5 h; a larger figure is a
# typo, and a run would wait it out.
MAX_WINDOW_S = 86_400.0


class Window(Model):
    """A time window in real-world seconds."""

    min_s: Annotated[float, Field(ge=0, le=MAX_WINDOW_S)] = 0.0
    max_s: Annotated[float, Field(gt=0, le=MAX_WINDOW_S)]

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.min_s > self.max_s:
            raise ValueError(f"min_s ({self.min_s}) is larger than max_s ({self.max_s})")
        return self


class StateExpectation(Model):
    status: NodeStatus
    min_restarts: Annotated[int, Field(ge=0, le=20)] = 0
    max_restarts: Annotated[int | None, Field(ge=0)] = Field(
        default=None, description="e.g. 0: the restart policy did NOT restart it."
    )


class FailureMode(enum.StrEnum):
    EXIT = "exit"  # the target's process exits (with any code)
    SILENT = "silent"  # nothing exits or logs: only the expectation's probes show it


class NodeSignature(Model):
    """Lines another node must log after the failure, within `within_s` real-world seconds."""

    node: str
    source: LogSource = LogSource.CURRENT
    in_order: Annotated[list[Pattern], Field(min_length=1)]
    within_s: Annotated[float, Field(gt=0, le=MAX_WINDOW_S)]


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


def _setup_action(action: Any) -> Any:
    if isinstance(action, Rollback):
        raise ValueError(
            "rollback in baseline.setup has nothing to roll back: setup brings the target from "
            "the lab's baseline to the scenario's starting configuration"
        )
    return action


SetupAction = Annotated[Action, AfterValidator(_setup_action)]


class Baseline(Model):
    """The steady state before the injection. `setup` brings the target from the lab's own
    baseline to the scenario's starting configuration (another model, another build) first:
    its changes are journalled and undone at cleanup like the injection's, and the probes then
    judge that configuration, so a reference recorded here (the correctness probe's) is the
    healthy answer of what the scenario breaks."""

    setup: list[SetupAction] = Field(
        default=[],
        description="Actions (the kinds inject takes, rollback excepted) applied before the "
        "baseline probes; journalled and undone at cleanup like the injection.",
    )
    probes: Annotated[list[Probe], Field(min_length=1)]


class Verification(Model):
    probes: Annotated[list[Probe], Field(min_length=1)]
    time_to_recover: Window


class Hint(Model):
    """A hint a drill gives the people recovering the lab (`gameday drill`)."""

    text: Annotated[str, Field(min_length=1, max_length=2000)]
    after_s: Annotated[float | None, Field(ge=0, le=MAX_WINDOW_S)] = Field(
        default=None,
        description="Wall-clock seconds after the hand-over when the drill releases it; "
        "null: only when someone asks for a hint.",
    )


# the sections a variant (per_lab, per_vllm) may replace, whole
SECTIONS = frozenset(
    ("target", "baseline", "inject", "expect", "detect", "recover", "verify", "hints")
)


class LabVariant(Model):
    """What differs on one kind of lab, in the same file (`per_lab: {kubernetes: {...}}`): each
    section given here replaces the scenario's own section of that name, whole, on that lab kind;
    the sections not given are shared. Whole sections, never a deep merge: what a lab runs is
    always readable in one place."""

    EMPTY: ClassVar[str] = (
        "a per_lab entry replaces at least one section: target, baseline, inject, expect, "
        "detect, recover, verify or hints"
    )

    target: str | None = None
    baseline: Baseline | None = None
    inject: Annotated[list[Action] | None, Field(min_length=1)] = None
    expect: Expectation | None = None
    detect: Detection | None = None
    recover: Annotated[list[RecoveryStep] | None, Field(min_length=1)] = None
    verify: Verification | None = None
    hints: list[Hint] | None = None

    @model_validator(mode="after")
    def _some(self) -> LabVariant:
        if self._replaces_nothing():
            raise ValueError(self.EMPTY)
        if self.recover is not None and not any(
            s.outcome is Outcome.RESTORES for s in self.recover
        ):
            raise ValueError("recover needs at least one step with outcome: restores")
        return self

    def _replaces_nothing(self) -> bool:
        return not self.sections()

    def sections(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in sorted(self.model_fields_set) if k in SECTIONS}


class VllmVariant(LabVariant):
    """What differs on a lab whose engine is another vLLM version (`per_vllm: {"0.33": {...}}`,
    the inventory's `gameday_lab.vllm_version`): the same whole-section rules as per_lab, plus a
    `note` that says what that vLLM really prints and where in its source, since an expectation
    changed for one version is a claim about vLLM that a reader must be able to check."""

    EMPTY: ClassVar[str] = (
        "a per_vllm entry replaces at least one section (target, baseline, inject, expect, "
        "detect, recover, verify or hints) or has a per_lab"
    )

    note: Annotated[str, Field(min_length=1, max_length=4000)] = Field(
        description="What this vLLM version prints instead, and why (its source file and "
        "function): shown in the plan and the report."
    )
    per_lab: dict[LabKind, LabVariant] = Field(
        default={},
        description="Sections that differ on one kind of lab running this vLLM version: the "
        "most specific replacement, over this entry's own sections and the scenario's per_lab.",
    )

    def _replaces_nothing(self) -> bool:
        return not self.sections() and not self.per_lab


class Resolved(Model):
    """Where each replaced section of a scenario came from, for one lab kind and vLLM version:
    section -> `per_lab.<kind>` or `per_vllm.<version>`."""

    origins: dict[str, str] = {}
    note: str | None = None  # the per_vllm entry's note, when one applies


def version_text(v: Any) -> Any:
    """A vLLM version as YAML reads it unquoted (0.33 is a float) -> its text, "0.33"."""
    return repr(v) if isinstance(v, float) else v


class Scenario(Model):
    api_version: Literal["gameday/v1"] = Field(alias="apiVersion")
    kind: Literal["Scenario"]
    metadata: Metadata
    labs: Annotated[list[LabKind], Field(min_length=1)]
    lab_notes: dict[LabKind, str] = {}
    target: str = "serving"
    baseline: Baseline
    inject: Annotated[list[Action], Field(min_length=1)]
    expect: Expectation
    detect: Detection = Detection()
    recover: Annotated[list[RecoveryStep], Field(min_length=1)]
    verify: Verification
    hints: list[Hint] = Field(
        default=[], description="Hints for a drill, in the order they are given (gameday drill)."
    )
    per_lab: dict[LabKind, LabVariant] = Field(
        default={},
        description="Sections that differ on one kind of lab (e.g. a restart policy that "
        "behaves otherwise on Kubernetes), each replacing the shared section whole.",
    )

    per_vllm: dict[Era, VllmVariant] = Field(
        default={},
        description="Sections that differ on a lab whose engine is another vLLM version (the "
        "inventory's gameday_lab.vllm_version), each replacing the shared section whole, with a "
        "note on what that vLLM prints. Over per_lab where both replace a section.",
    )

    @field_validator("per_vllm", mode="before")
    @classmethod
    def _yaml_number_keys(cls, v: Any) -> Any:
        return {version_text(k): e for k, e in v.items()} if isinstance(v, dict) else v

    def for_lab(self, kind: LabKind, vllm: Era = Era.V0_19) -> Scenario:
        """The scenario as it runs on a lab of this kind whose engine is this vLLM version: its
        per_lab sections for the kind, then its per_vllm sections for the version, in place of
        the shared ones, then the version's own per_lab sections for the kind. The more specific
        wins a section several replace: per_vllm over per_lab, since it is written against the
        words the engine prints, which a per_lab section written for another version would
        assert wrongly; a section that must differ on both axes goes in
        per_vllm.<version>.per_lab.<kind>."""
        update = self._variant_sections(kind, vllm)
        return self.model_copy(update=update) if update else self

    def _variants(self, kind: LabKind, vllm: Era) -> list[tuple[str, LabVariant]]:
        """The variants that apply, least specific first: per_lab.<kind>, per_vllm.<version>,
        per_vllm.<version>.per_lab.<kind>."""
        out: list[tuple[str, LabVariant]] = []
        if (lab_variant := self.per_lab.get(kind)) is not None:
            out.append((f"per_lab.{kind.value}", lab_variant))
        if (vllm_variant := self.per_vllm.get(vllm)) is not None:
            out.append((f"per_vllm.{vllm.value}", vllm_variant))
            if (both := vllm_variant.per_lab.get(kind)) is not None:
                out.append((f"per_vllm.{vllm.value}.per_lab.{kind.value}", both))
        return out

    def _variant_sections(self, kind: LabKind, vllm: Era) -> dict[str, Any]:
        update: dict[str, Any] = {}
        for _, variant in self._variants(kind, vllm):
            update |= variant.sections()
        return update

    def resolved(self, kind: LabKind, vllm: Era = Era.V0_19) -> Resolved:
        """Which sections a lab of this kind running this vLLM takes from which variant."""
        origins: dict[str, str] = {}
        for origin, variant in self._variants(kind, vllm):
            origins |= dict.fromkeys(variant.sections(), origin)
        vllm_variant = self.per_vllm.get(vllm)
        return Resolved(
            origins=dict(sorted(origins.items())),
            note=" ".join(vllm_variant.note.split()) if vllm_variant is not None else None,
        )

    @model_validator(mode="after")
    def _masks_needs_probes(self) -> Scenario:
        if any(s.outcome is Outcome.MASKS for s in self.recover) and not self.expect.probes:
            raise ValueError(
                "a step that `masks` shows the fault back with the expectation's probes: "
                "expect.probes must not be empty"
            )
        return self

    @model_validator(mode="after")
    def _rollback_keeps_setup(self) -> Scenario:
        """A `rollback` puts back every change of the run, the baseline's setup included: the
        target would leave the scenario's starting configuration (another model, another build)
        and every later probe would judge that instead."""
        for kind in self.labs:
            for vllm in Era:
                sc = self.for_lab(kind, vllm)
                if not sc.baseline.setup:
                    continue
                for i, step in enumerate(sc.recover):
                    if any(isinstance(a, Rollback) for a in (*step.actions, *step.reveal)):
                        where = "".join(sc_origin(self, kind, vllm, "recover"))
                        raise ValueError(
                            f"recover[{i}] ({step.name!r}{where}) rolls back, which also undoes "
                            "baseline.setup: put back what inject changed with set_args / "
                            "set_env (or a restart) instead"
                        )
        return self

    def replaced_on(self, kind: LabKind, vllm: Era = Era.V0_19) -> list[str]:
        """The sections a lab of this kind running this vLLM takes from per_lab or per_vllm."""
        return list(self.resolved(kind, vllm).origins)

    @property
    def uses_monitoring(self) -> bool:
        """Whether the scenario reads or changes Prometheus (alerts, PromQL or target probes,
        a scrape-config change): the lab's monitoring must be scraping before its baseline."""
        probes = [
            *self.baseline.probes,
            *self.expect.probes,
            *self.verify.probes,
        ]
        actions = [
            *self.baseline.setup,
            *self.inject,
            *(a for step in self.recover for a in (*step.actions, *step.reveal)),
        ]
        return (
            bool(self.detect.alerts)
            or any(isinstance(p, TargetsProbe | PromQLProbe) for p in probes)
            or any(isinstance(a, ScrapeTargets) for a in actions)
        )

    @model_validator(mode="after")
    def _recovers(self) -> Scenario:
        if not any(s.outcome is Outcome.RESTORES for s in self.recover):
            raise ValueError("recover needs at least one step with outcome: restores")
        kinds = [("per_lab", kind) for kind in self.per_lab]
        kinds += [
            (f"per_vllm.{v.value}.per_lab", kind)
            for v, variant in self.per_vllm.items()
            for kind in variant.per_lab
        ]
        for where, kind in kinds:
            if kind not in self.labs:
                raise ValueError(
                    f"{where} names {kind.value}, which is not in labs "
                    f"({', '.join(k.value for k in self.labs)}): add it to labs or remove the "
                    "entry"
                )
        return self


def sc_origin(sc: Scenario, kind: LabKind, vllm: Era, section: str) -> list[str]:
    """The origin of `section` on this lab ("per_lab.<kind>", "per_vllm.<v>"), if a variant."""
    origin = sc.resolved(kind, vllm).origins.get(section)
    return [f" from {origin}"] if origin else []


def variant_notes(sc: Scenario, kind: LabKind, vllm: Era) -> list[str]:
    """The report's lines on which sections the lab runs from per_lab and per_vllm, and the
    per_vllm entry's note on what that vLLM prints."""
    resolved = sc.resolved(kind, vllm)
    by_origin: dict[str, list[str]] = {}
    for section, origin in resolved.origins.items():
        by_origin.setdefault(origin, []).append(section)
    notes = []
    for origin, sections in by_origin.items():
        who = f"{kind.value} lab" if origin.startswith("per_lab.") else f"vLLM {vllm.value} lab"
        if origin.count("per_lab.") and origin.startswith("per_vllm."):
            who = f"{kind.value} lab on vLLM {vllm.value}"
        notes.append(f"{who}: runs its own {', '.join(sections)} ({origin})")
    if resolved.note and any(o.startswith("per_vllm.") for o in by_origin):
        notes.append(f"per_vllm.{vllm.value} note: {resolved.note}")
    return notes


class LoadedScenario(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    path: Path
    scenario: Scenario

    def for_lab(self, kind: LabKind, vllm: Era = Era.V0_19) -> LoadedScenario:
        """The scenario as a lab of this kind running this vLLM runs it (Scenario.for_lab)."""
        sc = self.scenario.for_lab(kind, vllm)
        return self if sc is self.scenario else self.model_copy(update={"scenario": sc})


HINT = "see README.md 'Scenario format' or run `gameday schema` for the full format"


def load_scenario(path: Path) -> LoadedScenario:
    src = load(path, ScenarioError, "scenario")
    if not isinstance(src.data, dict):
        raise ScenarioError(
            "a scenario is a mapping with apiVersion, kind, metadata, ...",
            file=path,
            line=1,
            hint=HINT,
        )
    if src.data.get("apiVersion") != API_VERSION:
        raise ScenarioError(
            f"apiVersion must be {API_VERSION!r} (got {src.data.get('apiVersion')!r})",
            file=path,
            line=src.line_of(("apiVersion",)),
            field="apiVersion",
            hint=HINT,
        )
    try:
        sc = Scenario.model_validate(src.data)
    except pydantic.ValidationError as exc:
        raise src.validation_error(exc, ScenarioError, HINT) from None
    check_files(src, path, sc)
    return LoadedScenario(path=path, scenario=sc)


def discover(paths: list[Path]) -> list[Path]:
    """Scenario files named on the command line; a directory means its *.yaml files."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.glob("*.y*ml") if q.suffix in (".yaml", ".yml"))
        else:
            out.append(p)
    return out


def json_schema() -> dict[str, Any]:
    schema = Scenario.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://gameday.dev/schema/scenario-v1.json"
    return schema
