"""Probes in the scenario format: what a scenario checks about the lab at one moment (health,
a real inference, scrape targets, PromQL, the GPU process list, a node's state, log silence,
correctness against a recorded reference).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from runner.spec.kinds import MAX_PATTERN, FinishReason, Model, NodeStatus
from runner.spec.patterns import compile_user

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
    expect_error: Annotated[str, Field(min_length=1, max_length=MAX_PATTERN)] | None = Field(
        default=None,
        description="With `expect: refused`: a regex (RE2) the error body must match, so that "
        "only this refusal passes (a 400 for a prompt too long is another failure). `gameday "
        "triage` recognises the scenario by it in a client's pasted error.",
    )
    api: Literal["chat", "completions"] = "chat"
    prompt: str
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 16
    temperature: float = 0.0
    expect_finish_reason: FinishReason | None = FinishReason.STOP
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0

    @field_validator("expect_error")
    @classmethod
    def _error_compiles(cls, v: str | None) -> str | None:
        return None if v is None else safe_regex(v)

    @model_validator(mode="after")
    def _status_with_refused(self) -> InferenceProbe:
        if self.expect_status is not None and self.expect != "refused":
            raise ValueError("expect_status goes with `expect: refused`")
        if self.expect_error is not None and self.expect != "refused":
            raise ValueError("expect_error goes with `expect: refused`")
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
    by the baseline's correctness probe where it has one (runner.run.correctness)."""

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
