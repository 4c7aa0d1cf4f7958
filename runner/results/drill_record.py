"""What a drill records of the people, as result types: the actions the lab's events showed
(whatever tool was used) and the hints given. The result schema (runner.results.schema)
keeps them, so it imports no feature package.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict

from runner.spec.kinds import Outcome


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActionKind(enum.StrEnum):
    """What a person did, as the lab's events show it, whatever tool they used."""

    RESTART = "restart"  # one node restarted
    GROUP_RESTART = "group_restart"  # several nodes restarted together
    CONFIG_CHANGE = "config_change"  # a node's args or env re-applied
    STOP = "stop"  # a node stopped and not restarted
    START = "start"  # a stopped node started
    PROCESS_STOPPED = "process_stopped"  # a program beside the engine stopped (a stray)


class ObservedAction(Frozen):
    at_s: float
    kind: ActionKind
    nodes: tuple[str, ...]
    detail: str  # e.g. "args: --max-model-len 16384 -> 4096"
    step: str | None = None  # the recovery step of the scenario it matches, if any
    outcome: Outcome | None = None  # that step's outcome
    shortcut: bool = False  # it matches a does_not_restore or forbidden step
    why: str = ""  # the step's `why` (or `forbidden`), shown at once for a shortcut


class HintView(Frozen):
    index: int  # 1-based, in the scenario's order
    text: str
    at_s: float
    requested: bool  # released on request (a person asked), not by its delay
