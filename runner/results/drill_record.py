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


class Actor(enum.StrEnum):
    """Who made a restart or a change the drill saw. Only people's actions (`person`) are
    matched to the scenario's steps and scored as shortcuts or fixes."""

    RESTART_POLICY = "restart_policy"  # the node's restart policy, restarting a failure
    LAB_VERB = "lab_verb"  # a person, with a `gameday lab` verb (it marks what it does)
    OUTSIDE_TOOL = "outside_tool"  # a person, with another tool (docker, kubectl, kill): its effect
    RUNNER = "runner"  # gameday itself (the fault's injection, reported after the hand-over)

    @property
    def person(self) -> bool:
        return self in (Actor.LAB_VERB, Actor.OUTSIDE_TOOL)

    @property
    def label(self) -> str:
        return _ACTOR_LABELS[self]


_ACTOR_LABELS = {
    Actor.RESTART_POLICY: "restart policy",
    Actor.LAB_VERB: "gameday lab verb",
    Actor.OUTSIDE_TOOL: "outside tool",
    Actor.RUNNER: "gameday",
}


class ObservedAction(Frozen):
    at_s: float
    kind: ActionKind
    nodes: tuple[str, ...]
    detail: str  # e.g. "args: --max-model-len 16384 -> 4096"
    step: str | None = None  # the recovery step of the scenario it matches, if any
    outcome: Outcome | None = None  # that step's outcome
    shortcut: bool = False  # it matches a does_not_restore or forbidden step
    # the step's `why` (or `forbidden`): at once on the facilitator's view, after the drill on
    # the responder's
    why: str = ""
    # who acted; records written before it was kept held only people's actions
    actor: Actor = Actor.OUTSIDE_TOOL


class HintView(Frozen):
    index: int  # 1-based, in the scenario's order
    text: str
    at_s: float
    requested: bool  # released on request (a person asked), not by its delay
