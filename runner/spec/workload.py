"""The scenario's `load` section: the users' traffic during the run, and what they may feel.

Traffic starts once the baseline holds and runs through inject, expect, detect, recover and
verify, then stops by itself: at `max_requests`, at `max_s`, or at the end of the run, whichever
comes first. It is sent to the lab's own nodes only, named as the inventory names them (`node`):
an address is not a field of the format, so no scenario can point load elsewhere.

Each request is counted in the phase its intended send time falls in; one sent earlier but
still in flight when the injection begins, or when the fault is in place, counts in that later
phase, as what its user met:

    baseline   the load's start -> the injection began
    inject     -> the fault in place (the injection's first change applied: a change applied
               can stop the target at once, a stray process takes seconds to hold its GPU)
    fault      -> the restoring recovery step applied
    recover    -> service verified (every verify probe passes)
    verify     -> the end of the load (`hold_requests` answered after it)

`impact` bounds each phase's error rate and its latencies against the baseline's, and two
windows in real-world seconds (converted by the lab's time scale like every other window):
`users_saw_first` (the fault in place -> the first failed request's answer, 0 if it came
before) and `users_saw_last` (the restoring step -> the last failure after which the error rate
stays at the baseline's).
"""

from __future__ import annotations

import enum
import ipaddress
import math
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from runner.spec.kinds import MAX_WINDOW_S, Model, Window

# requests per second: about what the generator drives on 2 cores (bench/RESULTS.md); past its
# ceiling it sends late, and the latencies measure the generator, not the server
MAX_RATE = 500.0
MAX_CONCURRENCY = 512
MAX_REQUESTS = 1_000_000
MAX_TOKENS = 100_000


class Api(enum.StrEnum):
    CHAT = "chat"  # /v1/chat/completions
    COMPLETIONS = "completions"  # /v1/completions


class LoadPhase(enum.StrEnum):
    """The spans of a run the load's requests are counted in (by intended send time)."""

    BASELINE = "baseline"
    INJECT = "inject"  # while the injection is applied, before the fault is in place
    FAULT = "fault"
    RECOVER = "recover"
    VERIFY = "verify"


class RequestKind(Model):
    """One kind of request in the mix, drawn with probability weight / (sum of weights). Its
    api is always written out: an entry with none is a mix left unfinished."""

    api: Api
    stream: bool = Field(
        default=False,
        description="Server-sent events: the time to first token is measured on these.",
    )
    weight: Annotated[float, Field(gt=0, le=1000)] = 1.0


class Lengths(Model):
    """Token counts drawn uniformly from [min, max] with the load's seed."""

    min: Annotated[int, Field(ge=1, le=MAX_TOKENS)]
    max: Annotated[int, Field(ge=1, le=MAX_TOKENS)]

    @model_validator(mode="after")
    def _ordered(self) -> Lengths:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class PhaseBounds(Model):
    """What users may feel in one phase. Latency ratios compare the phase's percentile of the
    requests that succeeded with the baseline's."""

    min_requests: Annotated[int, Field(ge=0, le=MAX_REQUESTS)] = Field(
        default=1, description="The phase must have seen this many requests to be judged."
    )
    max_errors: Annotated[int | None, Field(ge=0)] = None
    max_error_rate: Annotated[float | None, Field(ge=0, le=1)] = None
    min_error_rate: Annotated[float | None, Field(ge=0, le=1)] = Field(
        default=None, description="The fault must be felt: at least this share failed."
    )
    max_p50_ratio: Annotated[float | None, Field(gt=0, le=1e6)] = None
    max_p99_ratio: Annotated[float | None, Field(gt=0, le=1e6)] = None
    max_ttft_p99_ratio: Annotated[float | None, Field(gt=0, le=1e6)] = None

    @model_validator(mode="after")
    def _some(self) -> PhaseBounds:
        bounds = (
            self.max_errors,
            self.max_error_rate,
            self.min_error_rate,
            self.max_p50_ratio,
            self.max_p99_ratio,
            self.max_ttft_p99_ratio,
        )
        if all(b is None for b in bounds):
            raise ValueError(
                "a phase's impact needs at least one bound: max_errors, max_error_rate, "
                "min_error_rate, max_p50_ratio, max_p99_ratio or max_ttft_p99_ratio"
            )
        if (
            self.min_error_rate is not None
            and self.max_error_rate is not None
            and self.min_error_rate > self.max_error_rate
        ):
            raise ValueError("min_error_rate is larger than max_error_rate")
        return self


class Impact(Model):
    """The bounds on what users felt, per phase, and when they felt it."""

    baseline: PhaseBounds | None = None
    inject: PhaseBounds | None = None
    fault: PhaseBounds | None = None
    recover: PhaseBounds | None = None
    verify: PhaseBounds | None = None
    users_saw_first: Window | None = Field(
        default=None,
        description="Real-world seconds from the fault in place to the first failed "
        "request's answer (0 when one failed while the injection was applied; none fails it).",
    )
    users_saw_last: Window | None = Field(
        default=None,
        description="Real-world seconds from the restoring step to the last failure after "
        "which the error rate stays at the baseline's.",
    )

    def phases(self) -> dict[LoadPhase, PhaseBounds]:
        return {p: b for p in LoadPhase if (b := getattr(self, p.value)) is not None}


class Load(Model):
    """Traffic through the run: open loop (`rate`, requests per wall second, sent on schedule
    whether or not earlier ones have answered) or closed loop (`concurrency` users, each sending
    its next request when the last one answered)."""

    node: str | None = Field(
        default=None,
        description="The inventory host the traffic goes to (default: the scenario's target); "
        "its address is the lab's.",
    )
    rate: Annotated[float | None, Field(gt=0, le=MAX_RATE)] = Field(
        default=None,
        description="Open loop: requests per wall second (the lab's time scale does not "
        "multiply it). Latency counts from each request's intended send time.",
    )
    concurrency: Annotated[int | None, Field(ge=1, le=MAX_CONCURRENCY)] = Field(
        default=None, description="Closed loop: this many users, each one request at a time."
    )
    mix: Annotated[list[RequestKind], Field(min_length=1, max_length=16)] = [
        RequestKind(api=Api.CHAT)
    ]
    prompt_tokens: Lengths = Lengths(min=8, max=64)
    output_tokens: Lengths = Lengths(min=4, max=32)
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        default=30.0, description="Wall seconds one request may take before it is a timeout."
    )
    max_requests: Annotated[int, Field(ge=1, le=MAX_REQUESTS)] = 100_000
    max_s: Annotated[float, Field(gt=0, le=MAX_WINDOW_S)] = Field(
        default=7200.0,
        description="Real-world seconds the load runs at most (converted by the time scale).",
    )
    # counts, not durations: a percentile needs its samples whatever the lab's time scale, and
    # a duration in real-world seconds is 100 times shorter on a lab 100 times faster
    baseline_requests: Annotated[int, Field(ge=1, le=10_000)] = Field(
        default=20,
        description="Requests answered before the injection: the baseline's figures.",
    )
    hold_requests: Annotated[int, Field(ge=0, le=10_000)] = Field(
        default=20,
        description="Requests answered after service is verified: the verify phase's figures.",
    )
    impact: Impact = Impact()

    @field_validator("node")
    @classmethod
    def _a_name(cls, v: str | None) -> str | None:
        if v is not None and _looks_like_address(v):
            raise ValueError(
                f"{v!r} is an address: load goes to the lab's own nodes only, named as the "
                "inventory names them (e.g. node1); their addresses come from the lab"
            )
        return v

    @model_validator(mode="after")
    def _one_loop(self) -> Load:
        if (self.rate is None) == (self.concurrency is None):
            raise ValueError("a load has either rate (open loop) or concurrency (closed loop)")
        return self

    def scaled(self, factor: float) -> Load:
        """The load a lab of `load_scale` factor carries: the rate times the factor, or that
        many users (at least one); the counts, bounds and timeouts unchanged."""
        if factor == 1:
            return self
        if self.rate is not None:
            # six significant figures: 10 x 0.3 is recorded as 3, and no rate rounds to zero
            return self.model_copy(update={"rate": float(f"{self.rate * factor:.6g}")})
        users = max(1, math.floor((self.concurrency or 1) * factor + 0.5))  # half up
        return self.model_copy(update={"concurrency": users})

    def loop_text(self) -> str:
        return f"{self.rate:g} requests/s" if self.rate is not None else f"{self.concurrency} users"


def _looks_like_address(v: str) -> bool:
    if "/" in v or ":" in v:
        return True
    try:
        ipaddress.ip_address(v)
    except ValueError:
        return False  # a name: check_scenario holds it to the inventory's hosts
    return True
