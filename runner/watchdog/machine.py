"""The watchdog's state machine: a pure function from what was observed to what to do.

Why it is not "restart on crash" (the DeepGEMM crash write-up, section 8): the engine exits 0
(no restart policy sees a crash), only a whole-group restart brings a tensor-parallel group back,
a cold boot can take over an hour (a fixed boot grace kills a booting server), /health answers
200 while NCCL hangs (serving is proven by an inference request), and a crash that follows the
request's shape turns restarts into a loop (a restart budget matters more than detection).

All times are real-world seconds: the loop converts the lab's clock (its time_scale).
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WatchState(enum.StrEnum):
    BOOTING = "booting"  # the group is starting: judged by progress, not by a grace period
    SERVING = "serving"  # the last inference probe completed
    SUSPECT = "suspect"  # probes failing (or a node down), fewer than `suspect_after` in a row
    RESTARTING = "restarting"  # a whole-group restart was decided and is being made
    GAVE_UP = "gave_up"  # the restart budget is spent: alert, and restart no more


class Decision(enum.StrEnum):
    WAIT = "wait"  # booting: progress seen, or not yet stalled
    SERVING = "serving"  # serving proven by an inference probe
    OK = "ok"  # still serving
    SUSPECT = "suspect"  # a failed observation, not yet enough to act
    RESTART = "restart"  # restart the whole group now
    BOOT = "boot"  # the restart was made: the group boots
    GIVE_UP = "give_up"  # the budget is spent: alert and stop restarting
    HOLD = "hold"  # gave up earlier: no restart


class Policy(Frozen):
    """The watchdog's knobs, in real-world seconds."""

    probe_interval_s: Annotated[float, Field(gt=0)] = 30.0
    suspect_after: Annotated[int, Field(ge=1)] = 3
    restart_budget: Annotated[int, Field(ge=0)] = 3
    budget_window_s: Annotated[float, Field(gt=0)] = 3600.0
    # a boot that logs nothing and changes no node's state for this long has stalled; a boot
    # that keeps moving is never cut short, however long it takes
    boot_stall_s: Annotated[float, Field(gt=0)] = 1200.0


class Observation(Frozen):
    """One look at the group."""

    now_s: float
    progress: bool  # a node logged a new line or changed state since the last look
    ready: bool  # every node of the group reports ready
    down: tuple[str, ...] = ()  # nodes that exited or wait to be restarted
    # nodes that began a new incarnation since the last look and are not ready yet: restarted
    # by their runtime's policy or by a person, they boot
    started: tuple[str, ...] = ()
    probe_ok: bool | None = None  # the inference probe's outcome (None: not probed)
    probe_detail: str = ""


class Memory(Frozen):
    state: WatchState
    since_s: float  # when the state was entered
    progress_at_s: float  # the boot's last progress
    failures: int = 0  # failed observations in a row
    restarts: tuple[float, ...] = ()  # when each restart of the budget's window was decided


class Step(Frozen):
    memory: Memory
    decision: Decision
    reason: str


def start(now_s: float) -> Memory:
    """A watchdog begins as if the group were booting: a running group proves itself serving at
    the first probe, a booting one is given the time its progress earns."""
    return Memory(state=WatchState.BOOTING, since_s=now_s, progress_at_s=now_s)


def wants_probe(memory: Memory, ready: bool) -> bool:
    """Whether the loop sends an inference probe this time: always, but while booting only
    once every node says it is ready (a booting server refuses connections, which proves
    nothing)."""
    if memory.state is WatchState.RESTARTING:
        return False
    return ready or memory.state is not WatchState.BOOTING


def step(policy: Policy, m: Memory, obs: Observation) -> Step:
    """The next memory and the decision, with its reason."""
    now = obs.now_s
    if m.state is WatchState.RESTARTING:
        booting = Memory(
            state=WatchState.BOOTING, since_s=now, progress_at_s=now, restarts=m.restarts
        )
        return Step(
            memory=booting, decision=Decision.BOOT, reason="group restarted together; booting"
        )
    healthy = obs.probe_ok is True and not obs.down
    if m.state is WatchState.GAVE_UP:
        if healthy:
            return _serving(
                m, now, "serving again (recovered by someone else); budget reset", reset=True
            )
        return Step(
            memory=m, decision=Decision.HOLD, reason=f"gave up: no restart ({_failure(obs)})"
        )
    bad = obs.probe_ok is False or bool(obs.down)
    if m.state is WatchState.BOOTING:
        return _booting(policy, m, obs, healthy, bad)
    if obs.started and not obs.down:
        booting = Memory(
            state=WatchState.BOOTING, since_s=now, progress_at_s=now, restarts=m.restarts
        )
        return Step(
            memory=booting,
            decision=Decision.WAIT,
            reason=f"{', '.join(obs.started)} started anew (not by the watchdog): booting",
        )
    if healthy:
        if m.state is WatchState.SUSPECT:
            return _serving(m, now, f"inference completed after {m.failures} failed look(s)")
        return Step(memory=m, decision=Decision.OK, reason="inference completed")
    if not bad:
        return Step(memory=m, decision=Decision.OK, reason="not probed")
    return _failed(policy, m, obs)


def _booting(policy: Policy, m: Memory, obs: Observation, healthy: bool, bad: bool) -> Step:
    now = obs.now_s
    if healthy:
        return _serving(m, now, f"inference completed after {now - m.since_s:.0f} s of boot")
    if bad:
        return _failed(policy, m, obs)
    if obs.progress:
        moved = m.model_copy(update={"progress_at_s": now})
        return Step(
            memory=moved,
            decision=Decision.WAIT,
            reason=f"boot moving (booting {now - m.since_s:.0f} s)",
        )
    quiet = now - m.progress_at_s
    if quiet >= policy.boot_stall_s:
        return _restart_or_give_up(
            policy, m, now, f"boot stalled: no log line or state change for {quiet:.0f} s"
        )
    return Step(
        memory=m,
        decision=Decision.WAIT,
        reason=f"boot quiet for {quiet:.0f} s of {policy.boot_stall_s:.0f} s "
        f"(booting {now - m.since_s:.0f} s)",
    )


def _failed(policy: Policy, m: Memory, obs: Observation) -> Step:
    failures = m.failures + 1
    what = _failure(obs)
    if failures >= policy.suspect_after:
        return _restart_or_give_up(
            policy, m, obs.now_s, f"{failures} failed look(s) in a row: {what}"
        )
    since = m.since_s if m.state is WatchState.SUSPECT else obs.now_s
    suspect = m.model_copy(
        update={"state": WatchState.SUSPECT, "since_s": since, "failures": failures}
    )
    return Step(
        memory=suspect,
        decision=Decision.SUSPECT,
        reason=f"failed look {failures} of {policy.suspect_after}: {what}",
    )


def _restart_or_give_up(policy: Policy, m: Memory, now: float, why: str) -> Step:
    recent = tuple(t for t in m.restarts if now - t < policy.budget_window_s)
    if len(recent) >= policy.restart_budget:
        gave_up = Memory(
            state=WatchState.GAVE_UP, since_s=now, progress_at_s=m.progress_at_s, restarts=recent
        )
        return Step(
            memory=gave_up,
            decision=Decision.GIVE_UP,
            reason=f"{why}; restart budget spent ({len(recent)} restart(s) within "
            f"{policy.budget_window_s:.0f} s): a person must look",
        )
    restarting = Memory(
        state=WatchState.RESTARTING, since_s=now, progress_at_s=now, restarts=(*recent, now)
    )
    return Step(
        memory=restarting,
        decision=Decision.RESTART,
        reason=f"{why}; whole-group restart {len(recent) + 1} of {policy.restart_budget} "
        f"within {policy.budget_window_s:.0f} s",
    )


def _serving(m: Memory, now: float, reason: str, reset: bool = False) -> Step:
    serving = Memory(
        state=WatchState.SERVING,
        since_s=now,
        progress_at_s=now,
        restarts=() if reset else m.restarts,
    )
    return Step(memory=serving, decision=Decision.SERVING, reason=reason)


def _failure(obs: Observation) -> str:
    parts = []
    if obs.down:
        parts.append(f"down: {', '.join(obs.down)}")
    if obs.probe_ok is False:
        parts.append(f"inference failed: {obs.probe_detail}")
    return "; ".join(parts) or "nothing failed"
