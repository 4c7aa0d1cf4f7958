"""The watchdog's loop: look at the group through the lab's driver, ask the state machine,
act (a whole-group restart through the driver, an alert), and record every decision.

The loop works in the lab's clock: real-world seconds are the lab's seconds times its
time_scale, so a lab 100x faster than real GPUs runs an hour's policy in 36 seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import httpx

from runner.errors import GamedayError
from runner.labs.base import LabDriver, NodeState
from runner.results.schema import Verdict
from runner.run.probing import ProbeEnv, run_probe
from runner.spec.inventory import Role
from runner.spec.kinds import NodeStatus
from runner.spec.probes import InferenceProbe
from runner.watchdog.alert import gave_up_alert, post_alert
from runner.watchdog.machine import (
    Decision,
    Memory,
    Observation,
    Policy,
    Step,
    WatchState,
    start,
    step,
    wants_probe,
)
from runner.watchdog.metrics import WatchMetrics

log = logging.getLogger("gameday.watchdog")
PROBE_PROMPT = "Watchdog check. Answer only OK."
DOWN = (NodeStatus.EXITED, NodeStatus.CRASH_LOOPING)


@dataclass(frozen=True)
class LabClock:
    """Real-world seconds since the watch began: lab seconds times the lab's time_scale."""

    scale: float
    origin: float = field(default_factory=time.monotonic)

    def now_s(self) -> float:
        return (time.monotonic() - self.origin) * self.scale

    def wait(self, stop: threading.Event, real_s: float) -> bool:
        """Wait real_s real-world seconds (real_s / scale here); True if asked to stop."""
        return stop.wait(real_s / self.scale)


@dataclass
class Observer:
    """What moved in the group since the last look: new log lines, changed node states."""

    lab: LabDriver
    nodes: list[str]
    seen: dict[str, tuple[object, ...]] = field(default_factory=dict)
    log_at: dict[str, datetime | None] = field(default_factory=dict)

    def look(self) -> tuple[bool, bool, tuple[str, ...], tuple[str, ...]]:
        """(progress, ready, down, started) of the group now."""
        states = self.lab.states()
        progress = False
        started: list[str] = []
        for n in self.nodes:
            st = states[n]
            key = _key(st)
            old = self.seen.get(n)
            if old is not None and old[1:3] != key[1:3] and not st.ready:
                started.append(n)
            progress |= self.seen.get(n) != key
            self.seen[n] = key
            fresh = self.lab.logs_since(n, self.log_at.get(n))
            since = self.log_at.get(n)
            new = [ln for ln in fresh if since is None or ln.ts > since]
            if new:
                progress = True
                self.log_at[n] = new[-1].ts
        ready = all(states[n].ready and states[n].status is NodeStatus.RUNNING for n in self.nodes)
        down = tuple(n for n in self.nodes if states[n].status in DOWN)
        return progress, ready, down, tuple(started)


def _key(st: NodeState) -> tuple[object, ...]:
    return (st.status, st.incarnation, st.generation, st.ready, st.restarts)


def probe_target(lab: LabDriver, nodes: list[str]) -> str:
    """The node that answers the group's API: its head, else its first node."""
    heads = [n for n in nodes if lab.inventory.node(n).role is not Role.WORKER]
    return heads[0] if heads else nodes[0]


@dataclass
class Watchdog:
    lab: LabDriver
    inventory_path: str
    group: str
    nodes: list[str]
    policy: Policy
    metrics: WatchMetrics
    alert_url: str | None = None
    on_step: Callable[[Step], None] | None = None  # after each decision (tests, the CLI)
    memory: Memory | None = None

    def run(self, stop: threading.Event) -> None:
        """Look, decide and act every probe interval until `stop` is set."""
        clock = LabClock(self.lab.inventory.lab.time_scale)
        observer = Observer(self.lab, self.nodes)
        target = probe_target(self.lab, self.nodes)
        probe = InferenceProbe(
            kind="inference",
            node=target,
            prompt=PROBE_PROMPT,
            max_tokens=8,
            expect_finish_reason=None,
        )
        self.memory = start(clock.now_s())
        with httpx.Client(trust_env=False) as http:
            env = ProbeEnv(http=http, lab=self.lab, scale=clock.scale, target=target)
            while True:
                self.tick(clock, observer, env, probe, http)
                if clock.wait(stop, self.policy.probe_interval_s):
                    return

    def tick(
        self,
        clock: LabClock,
        observer: Observer,
        env: ProbeEnv,
        probe: InferenceProbe,
        http: httpx.Client,
    ) -> Step:
        assert self.memory is not None
        try:
            progress, ready, down, started = observer.look()
        except GamedayError as exc:
            progress, ready, down, started = False, False, (), ()
            log.warning("could not read the lab: %s", exc.message)
        probe_ok: bool | None = None
        detail = ""
        if wants_probe(self.memory, ready):
            result = run_probe(env, probe)
            probe_ok = result.verdict is Verdict.PASSED
            detail = result.observed
        obs = Observation(
            now_s=clock.now_s(),
            progress=progress,
            ready=ready,
            down=down,
            started=started if self.memory.state is not WatchState.RESTARTING else (),
            probe_ok=probe_ok,
            probe_detail=detail[:200],
        )
        s = step(self.policy, self.memory, obs)
        self.memory = s.memory
        self._record(s, obs)
        self._act(s, http)
        return s

    def _record(self, s: Step, obs: Observation) -> None:
        self.metrics.record(s.memory.state, s.decision, obs.probe_ok)
        level = logging.ERROR if s.decision is Decision.GIVE_UP else logging.INFO
        extra = {
            "group": self.group,
            "state": s.memory.state.value,
            "decision": s.decision.value,
            "real_s": round(obs.now_s, 1),
        }
        log.log(level, s.reason, extra={"watch": extra})
        if self.on_step is not None:
            self.on_step(s)

    def _act(self, s: Step, http: httpx.Client) -> None:
        if s.decision is Decision.RESTART:
            try:
                self.lab.restart(self.nodes)
            except GamedayError as exc:
                # the next looks see the group still down, and the budget bounds the retries
                log.error(
                    "the restart failed: %s", exc.message, extra={"watch": {"group": self.group}}
                )
        elif s.decision is Decision.GIVE_UP and self.alert_url:
            alert = gave_up_alert(
                self.lab.inventory.lab.name, self.inventory_path, self.group, self.nodes, s.reason
            )
            try:
                post_alert(http, self.alert_url, alert)
                log.info("alert sent to %s", self.alert_url, extra={"watch": {"group": self.group}})
            except GamedayError as exc:
                log.error("%s", exc.message, extra={"watch": {"group": self.group}})
