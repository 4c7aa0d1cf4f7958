"""The scenario format's base model and closed sets: lab kinds, node states, log sources,
finish reasons, outcomes, and the time window every section shares (vLLM's start-up phases are
vLLM's: vllmfacts.startup).
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

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


class RestartPolicy(enum.StrEnum):
    NO = "no"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"  # with CrashLoopBackOff-style back-off


class NodeStatus(enum.StrEnum):
    """Closed set of node states every lab maps its own onto."""

    PENDING = "pending"
    RUNNING = "running"
    EXITED = "exited"
    CRASH_LOOPING = "crash_looping"  # waiting to restart after failures (CrashLoopBackOff)


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


# The longest window a scenario may state, in real-world seconds: a day. The slowest failure in
# the write-ups (the DeepGEMM crash write-up's worker heartbeat noticing a dead head) takes
# about 2.5 h; a larger figure is a typo, and a run would wait it out.
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
