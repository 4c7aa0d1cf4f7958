"""One drill: baseline, inject and expect exactly as a run does (runner.run's context and phase
modules), then hand over: no recovery step runs. The drill watches the lab's events (the nodes,
and a person's actions, runner.drill.recognise), the verify probes (once a second, and on each
lab event) and the scenario's expected alerts, until the probes pass (recovered), `timeout_s`
passes, or someone gives up (Ctrl-C, a GIVE_UP request). Then the run's cleanup puts the lab
back to its baseline, as after a run.

Everything is published on a DrillBus (its folder: `<lab state>/drill/`). The drill's clock
(`at_s`, times to detect, acknowledge and recover) is wall-clock seconds since the fault was in
place. The time to detect (the first expected alert firing) is the system's: Prometheus's `for:`
runs on the lab's scaled clock, so it is converted by the lab's time scale (5.9 wall seconds at
x100 are 590 real-world seconds), as the time to fail is. The people's times (to acknowledge and
recover) are wall seconds, which are real-world seconds: the scale speeds up the lab, not the
people (runner.results.durations).
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from runner.drill import verb_log
from runner.drill.bus import DrillBus, Request
from runner.drill.hints import Ack, Hints
from runner.drill.model import DrillPhase, DrillStatus, EventKind, NodeView, ProbeView, UsersView
from runner.drill.recognise import (
    GROUP_WINDOW_S,
    Configs,
    Recogniser,
    match,
    restarts_after,
    together_groups,
)
from runner.drill.users import LiveUsers
from runner.errors import GamedayError, LabError
from runner.labs.base import EventType, LabDriver, LabEvent, NodeConfig
from runner.results.drill_record import Actor, ObservedAction
from runner.results.durations import wall_s
from runner.results.schema import DrillOutcome, DrillRecord, Phase, ScenarioResult
from runner.run import prometheus_api as prometheus
from runner.run.context import Context, Progress, ScenarioAborted, all_passed, http_client, utcnow
from runner.run.impact import Users
from runner.run.interrupt import shielded_from_sigint
from runner.run.journal import Journal
from runner.run.orchestration import LAB_CARRIES_OUT, result
from runner.run.phases.baseline import alerts_quiet, baseline, monitoring_scraping
from runner.run.phases.cleanup import cleanup
from runner.run.phases.expect import expect
from runner.run.phases.inject import inject
from runner.run.record import Recorder
from runner.spec.kinds import NodeStatus
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import TimeScale

if TYPE_CHECKING:
    pass

DRILL_DIR = "drill"
MIN_TIMEOUT_S = 600.0  # wall seconds a drill waits at least, whatever the lab's scale
TICK_S = 1.0  # wall seconds between looks at what no lab event announces
CLOCK_DIGITS = 3  # the drill clock's readings (seconds since the fault) keep milliseconds
TIMELINE_KEPT = 50  # timeline lines in the status (the report has them all)
OUTCOME_PHASE = {
    DrillOutcome.RECOVERED: DrillPhase.RECOVERED,
    DrillOutcome.TIMED_OUT: DrillPhase.TIMED_OUT,
    DrillOutcome.GAVE_UP: DrillPhase.GAVE_UP,
    DrillOutcome.ERROR: DrillPhase.ERROR,
}


def drill_folder(lab: LabDriver) -> Path:
    return lab.state_dir / DRILL_DIR


def default_timeout(ls: LoadedScenario) -> float:
    """The scenario's time-to-recover window, at least MIN_TIMEOUT_S. A person's wall second
    is a real-world second (the time scale speeds up the lab, not the people), so the window is
    the people's as it is, whatever the lab's scale: a drill that stopped them sooner would cut
    short a recovery its verdict would pass."""
    return max(ls.scenario.verify.time_to_recover.max_s, MIN_TIMEOUT_S)


@dataclass(frozen=True)
class DrillOptions:
    timeout_s: float | None = None  # wall seconds after the hand-over (None: default_timeout)
    seat: int | None = None
    tick_s: float = TICK_S
    window_s: float = GROUP_WINDOW_S


class Drill:
    """A drill of one scenario on one lab; `run()` carries it out and returns its result. The
    bus is there from the start, so that a page can be served before `run()`."""

    def __init__(
        self,
        ls: LoadedScenario,
        lab: LabDriver,
        journal: Journal,
        progress: Progress,
        *,
        http: httpx.Client | None = None,
        options: DrillOptions = DrillOptions(),
    ) -> None:
        ls = ls.for_lab(lab.kind, lab.inventory.lab.vllm_version, lab.inventory.lab.platform)
        self.ls, self.lab, self.options = ls, lab, options
        sc = ls.scenario
        self.bus = DrillBus(
            DrillStatus(
                scenario=sc.metadata.id,
                title=sc.metadata.title,
                lab=lab.inventory.lab.name,
                seat=options.seat,
                phase=DrillPhase.BASELINE,
                started_at=utcnow(),
                hints_left=len(sc.hints),
            ),
            drill_folder(lab),
        )
        self.ctx = Context(
            lab=lab,
            scale=TimeScale.of(lab.inventory.lab),
            journal=journal,
            scenario_id=sc.metadata.id,
            target=sc.target,
            progress=self._progress(progress),
            rec=Recorder(),
            http=http or http_client(),
            seq=lab.last_event_seq(),
            folder=ls.path.parent,
        )
        self.users = Users(self.ctx, sc.load, lab.inventory.lab.load_scale)
        self._live: LiveUsers | None = None
        self.hints = Hints(list(sc.hints))
        self.ack = Ack()
        self.actions: list[ObservedAction] = []  # people's
        self.not_people: list[ObservedAction] = []  # a restart policy's, gameday's own
        self._looping: set[str] = set()  # nodes their restart policy is restarting, not ready
        self.outcome: DrillOutcome | None = None
        self.fault_at: datetime | None = None
        self.handed_over_at: datetime | None = None
        self._recogniser: Recogniser | None = None
        self.detected_at_s: float | None = None
        self.recovered_at_s: float | None = None
        self._lock = threading.RLock()
        self._give_up = threading.Event()
        self.bus.on_request(self._request)

    # ---- the status ----
    def clock(self) -> float | None:
        if self.fault_at is None:
            return None
        return round((utcnow() - self.fault_at).total_seconds(), CLOCK_DIGITS)

    def latest_moment(self, at_s: float) -> datetime:
        """The latest moment a reading of the clock can stand for: a reading is rounded, so the
        moment it was taken may be up to half a unit later. An action's reading is taken once
        the drill has seen it, never before a verb that made it began: a verb's record is matched
        against this bound, not the rounded reading, which can fall before the verb's begin."""
        assert self.fault_at is not None  # actions are seen only after the hand-over
        return self.fault_at + timedelta(seconds=at_s + 0.5 * 10**-CLOCK_DIGITS)

    def _publish(
        self, kind: EventKind, text: str, data: dict[str, Any] | None = None, **changes: Any
    ) -> None:
        with self._lock:
            st = self.bus.status
            timeline = (*st.timeline, text)[-TIMELINE_KEPT:]
            status = st.model_copy(
                update={"clock_s": self.clock(), "timeline": timeline, **changes}
            )
            if "phase" in changes:
                data = {"phase": changes["phase"].value, **(data or {})}
            self.bus.publish(kind, text, data, status=status)

    def _phase(self, phase: DrillPhase, text: str = "") -> None:
        self._publish(EventKind.PHASE, text or f"phase {phase.value}", phase=phase)

    def _progress(self, outer: Progress) -> Progress:
        def progress(message: str) -> None:
            outer(message)
            self._publish(EventKind.TIMELINE, message)

        return progress

    def _note(self, text: str, kind: EventKind = EventKind.TIMELINE, **changes: Any) -> None:
        """A line for the report's timeline and the page's."""
        self.ctx.rec.event(f"drill: {text}")
        self._publish(kind, text, **changes)

    # ---- the drill ----
    def run(self) -> ScenarioResult:
        started = utcnow()
        verb_log.clear(self.lab.state_dir)
        try:
            self._prepare()
            self._handover()
            self._watch()
            self.users.hold()  # the load's verify phase: after service was back
        except ScenarioAborted:
            self._could_not("the failure did not show as the scenario says: nothing to hand over")
        except KeyboardInterrupt:
            self._end(DrillOutcome.GAVE_UP, "interrupted before the hand-over")
            self._judge(0.0)
        except GamedayError as exc:
            self._could_not(str(exc))
        except Exception as exc:  # a bug: this drill's verdict is `error`, with its traceback
            self._could_not(
                f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))
            )
        finally:
            with shielded_from_sigint():
                self._stop_users()
                self._phase(DrillPhase.CLEANUP)
                cleanup(self.ctx)
                self._phase(DrillPhase.DONE)
                self.bus.close()
        return self._result(started)

    def _prepare(self) -> None:
        ctx, ls = self.ctx, self.ls
        if not ctx.lab.inventory.resolve(ls.scenario.target):
            raise LabError(
                f"scenario target {ls.scenario.target!r} is not a host or group of "
                f"{ctx.lab.inventory.path}"
            )
        self._phase(DrillPhase.BASELINE)
        baseline(ctx, ls)
        self._start_users()
        monitoring_scraping(ctx, ls)
        alerts_quiet(ctx, ls)
        self._phase(DrillPhase.INJECT)
        inject(ctx, ls)
        self._phase(DrillPhase.EXPECT)
        ctx.times.to_fail = expect(ctx, ls).time_to_fail_s
        if ctx.times.to_fail is None:
            raise ScenarioAborted

    # ---- the users (the scenario's load) ----
    def _start_users(self) -> None:
        """The load from the baseline to the end of the drill, its figures on the page live."""
        self.users.begin()
        if self.users.traffic is not None:
            fault = self.ctx

            def fault_at() -> float | None:
                t = fault.fault_began_at or fault.injected_at
                return None if t is None else t.timestamp()

            self._live = LiveUsers(self.users.traffic, fault_at, self._show_users).start()

    def _show_users(self, view: UsersView) -> None:
        self._publish(EventKind.USERS, view.line(), users=view)

    def _stop_users(self) -> None:
        """Stop the load (whatever ended the drill) before the cleanup touches the lab: its
        figures are the drill's, not the cleanup's."""
        if self._live is not None:
            self._live.stop()
        self.users.finish()

    def _handover(self) -> None:
        self.fault_at = self.ctx.fault_at or self.ctx.injected_at or utcnow()
        self.handed_over_at = utcnow()
        # the nodes' state is taken before the people are told: an action they take at once
        # must be a change from it
        self._recogniser = self._recogniser_now()
        self._looping = set(self._recogniser.restarting)
        self._note(
            f"handed over {self.clock():.1f} s after the fault; no recovery step runs",
            EventKind.PHASE,
            phase=DrillPhase.HANDED_OVER,
            fault_at=self.fault_at,
            nodes=self._nodes(),
        )

    def _could_not(self, why: str, detail: str = "") -> None:
        self.ctx.rec.error(
            phase=Phase.RUN, name="lab", expected=LAB_CARRIES_OUT, observed=why, detail=detail
        )
        self._end(DrillOutcome.ERROR, f"gameday could not carry the drill: {why}")

    def _end(self, outcome: DrillOutcome, text: str) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self._note(text, EventKind.PHASE, phase=OUTCOME_PHASE[outcome])

    # ---- watching ----
    def _recogniser_now(self) -> Recogniser:
        lab, opts = self.lab, self.options
        names = [n.name for n in lab.inventory.nodes]
        states = lab.states()
        return Recogniser(
            configs={n: lab.config(n) for n in names},
            generations={n: states[n].generation for n in names},
            incarnations={n: states[n].incarnation for n in names},
            groups=together_groups(self.ls.scenario.recover, self._resolve),
            window_s=opts.window_s,
            policies={n.name: n.restart for n in lab.inventory.nodes if n.name in names},
            since=self.handed_over_at,
            restarting=frozenset(
                n.name
                for n in lab.inventory.nodes
                if (st := states[n.name]).status is NodeStatus.CRASH_LOOPING
                or (
                    st.status is NodeStatus.EXITED
                    and st.last_exit is not None
                    and restarts_after(n.restart, st.last_exit.code)
                )
            ),
        )

    def _watch(self) -> None:
        lab, opts = self.lab, self.options
        recogniser = self._recogniser
        assert recogniser is not None  # set at the hand-over
        timeout = opts.timeout_s if opts.timeout_s is not None else default_timeout(self.ls)
        deadline = time.monotonic() + timeout
        last_look = -float("inf")
        threading.Thread(target=self._clock, name="drill-clock", daemon=True).start()
        try:
            while self.outcome is None:
                if self._give_up.is_set():
                    self._end(DrillOutcome.GAVE_UP, "gave up: cleaning up to the baseline")
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._end(DrillOutcome.TIMED_OUT, f"timed out after {timeout:g} s")
                    break
                evs = lab.wait_events(self.ctx.seq, min(opts.tick_s, remaining))
                self._events(evs, recogniser)
                self._actions(recogniser.tick(self.clock() or 0.0))
                if evs or time.monotonic() - last_look >= opts.tick_s:
                    last_look = time.monotonic()
                    self._alerts()
                    if self._probes():
                        # what happened up to now is the people's, before service was back
                        self._events(lab.wait_events(self.ctx.seq, 0), recogniser)
                        self._actions(recogniser.flush(self.clock() or 0.0))
                        self._recovered()
                self._hints_due()
        except KeyboardInterrupt:
            self._end(DrillOutcome.GAVE_UP, "interrupted (Ctrl-C): cleaning up to the baseline")
        self._judge(timeout)

    def _clock(self) -> None:
        """The status's clock, twice a second while the drill watches (a probe that waits for
        its timeout does not stop it)."""
        while self.outcome is None:
            with self._lock:
                self.bus.update(self.bus.status.model_copy(update={"clock_s": self.clock()}))
            time.sleep(0.5)

    def _resolve(self, name: str) -> list[str]:
        return [n.name for n in self.lab.inventory.resolve(name)]

    def _nodes(self) -> tuple[NodeView, ...]:
        return tuple(
            NodeView(
                name=s.name,
                status=s.status,
                ready=s.ready,
                restarts=s.restarts,
                generation=s.generation,
                crash_looping=s.status is NodeStatus.CRASH_LOOPING or s.name in self._looping,
            )
            for s in self.lab.states().values()
        )

    def _events(self, evs: list[LabEvent], recogniser: Recogniser) -> None:
        if not evs:
            return
        self.ctx.seq = evs[-1].seq
        # per node, its crash loop going round (failures its policy restarts, the back-off, the
        # policy's starts, their output) apart from the rest: a page folds the loop's events
        # into one line
        parts: dict[tuple[str, bool], list[LabEvent]] = {}
        others: list[ObservedAction] = []
        for e in evs:
            self.ctx.rec.lab_event(e)
            config = None
            if e.type in (EventType.STARTED, EventType.APPLIED) and e.node in self._configs():
                config = self.lab.config(e.node)
            self._actions(recogniser.feed(e, self.clock() or 0.0, config))
            mine = recogniser.take_others()
            others += mine
            self._track_loop(e)
            by_policy = any(a.actor is Actor.RESTART_POLICY for a in mine)
            if e.type is EventType.STARTED and not by_policy:
                self._looping.discard(e.node)  # a new start: a loop again once it fails again
            parts.setdefault((e.node, self._in_loop(e, by_policy)), []).append(e)
        self._record_others(others)
        nodes = self._nodes()
        for (node, loop), part in parts.items():
            changed = ", ".join(sorted({f"{e.node} {e.type.value}" for e in part}))
            # the lab's own stamp of the newest event: how late the page learns of it
            data: dict[str, Any] = {"lab_ts": part[-1].ts.isoformat(), "node": node}
            if loop:
                data["actor"] = Actor.RESTART_POLICY.value
                data["crash_loop"] = {
                    "crashes": sum(e.failure is not None for e in part),
                    "restarts": sum(e.type is EventType.STARTED for e in part),
                }
            self._publish(EventKind.NODE, changed, data, nodes=nodes)

    def _in_loop(self, e: LabEvent, by_policy: bool) -> bool:
        """Whether the event is a crash loop going round (after `_track_loop` saw it)."""
        if e.type is EventType.STARTED:
            return by_policy
        if e.failure is not None or e.type in (EventType.BACKOFF, EventType.FIRST_OUTPUT):
            return e.node in self._looping
        return e.type is EventType.UNREADY and e.node in self._looping

    def _track_loop(self, e: LabEvent) -> None:
        """A node is crash-looping from a failure its restart policy restarts until it is ready
        again (or someone stops it)."""
        if e.type is EventType.READY or (e.type is EventType.EXITED and e.stopped):
            self._looping.discard(e.node)
        elif (failure := e.failure) is not None:
            node = next((n for n in self.lab.inventory.nodes if n.name == e.node), None)
            if node is not None and restarts_after(node.restart, failure.code):
                self._looping.add(e.node)

    def _record_others(self, others: list[ObservedAction]) -> None:
        """Restarts no person made: in the drill's record with who made them, never scored."""
        self.not_people += others
        for a in others:
            self.ctx.rec.event(
                f"drill: {a.kind.value} {', '.join(a.nodes)}: {a.detail} (at {a.at_s:.1f} s)"
            )

    def _configs(self) -> set[str]:
        return {n.name for n in self.lab.inventory.nodes}

    def _actions(self, actions: list[ObservedAction]) -> None:
        verbs = verb_log.read(self.lab.state_dir) if actions else []
        for a in actions:
            if self.fault_at is not None and verb_log.by_verb(
                verbs, a.kind, a.nodes, self.latest_moment(a.at_s)
            ):
                a = a.model_copy(update={"actor": Actor.LAB_VERB})
            current: dict[str, NodeConfig] = {n: self.lab.config(n) for n in a.nodes}
            base = {n: self.lab.baseline_config(n) for n in a.nodes}
            m = match(a, self.ls.scenario.recover, self._resolve, Configs(base, current))
            self.actions.append(m)
            text = describe(m)
            with self._lock:
                actions_now = (*self.bus.status.actions, m)
            self.ctx.rec.event(f"drill: {text} (at {m.at_s:.1f} s)")
            self._publish(EventKind.ACTION, text, m.model_dump(mode="json"), actions=actions_now)

    def _probes(self) -> bool:
        results = self.ctx.probe(self.ls.scenario.verify.probes)
        views = tuple(
            ProbeView(name=r.name, verdict=r.verdict.value, observed=r.observed) for r in results
        )
        if views != self.bus.status.probes:
            passing = sum(v.verdict == "passed" for v in views)
            self._publish(EventKind.PROBE, f"probes: {passing}/{len(views)} pass", probes=views)
        return all_passed(results)

    def _alerts(self) -> None:
        expected = self.ls.scenario.detect.alerts
        if not expected:
            return
        try:
            prom = self.lab.prometheus_url()
            if not prom:
                return
            alerts = [a for a in prometheus.alerts(self.ctx.http, prom) if a["state"] == "firing"]
        except GamedayError:
            return  # Prometheus not answering this second: asked again at the next
        firing = tuple(sorted({str(a["labels"].get("alertname", "")) for a in alerts}))
        if firing != self.bus.status.alerts:
            self._publish(
                EventKind.ALERT, "firing: " + (", ".join(firing) or "none"), alerts=firing
            )
        if self.detected_at_s is not None:
            return
        for x in expected:
            if any(
                a["labels"].get("alertname") == x.name
                and all(a["labels"].get(k) == v for k, v in x.labels.items())
                for a in alerts
            ):
                self.detected_at_s = self.clock()
                self._note(
                    f"detected: alert {x.name} firing at {self.detected_at_s:.1f} s",
                    EventKind.DETECTED,
                    detected_at_s=self.detected_at_s,
                )
                return

    def _recovered(self) -> None:
        # the people's restore is the moment service is back: the load's fault phase is the
        # time they worked, its verify phase the time after (runner.run.impact's marks)
        self.ctx.restore_at = self.ctx.restored_at = utcnow()
        self.recovered_at_s = self.clock()
        self._note(
            f"recovered: every verify probe passes at {self.recovered_at_s:.1f} s",
            EventKind.RECOVERED,
            recovered_at_s=self.recovered_at_s,
        )
        self._end(DrillOutcome.RECOVERED, "service is back: cleaning up")

    def _hints_due(self) -> None:
        if self.handed_over_at is None:
            return
        since = (utcnow() - self.handed_over_at).total_seconds()
        with self._lock:
            for h in self.hints.due(since, self.clock() or 0.0):
                self._hint_released(h.index, h.text)

    def _hint_released(self, index: int, text: str) -> None:
        self._note(
            f"hint {index}: {text}",
            EventKind.HINT,
            hints=tuple(self.hints.released),
            hints_left=self.hints.left,
        )

    def _judge(self, timeout: float) -> None:
        """The drill's verdict: recovered within the scenario's window, or not. The people's
        time is wall seconds and the window real-world seconds, which are one unit: the time
        scale speeds up the lab, not the people, so they are compared as they are."""
        window = self.ls.scenario.verify.time_to_recover
        ttr = self.recovered_at_s
        span = f"{window.min_s:g}-{window.max_s:g}" if window.min_s else f"{window.max_s:g}"
        expected = (
            f"recovered within {span} s of the fault (a person's wall seconds: the time scale "
            "speeds up the lab, not the people)"
        )
        observed = {
            DrillOutcome.TIMED_OUT: f"not recovered: timed out after {timeout:g} s wall",
            DrillOutcome.GAVE_UP: "not recovered: gave up",
        }.get(self.outcome or DrillOutcome.ERROR, f"recovered in {wall_s(ttr)}")
        ok = ttr is not None and (window.min_s or 0.0) <= ttr <= window.max_s
        self.ctx.rec.check(
            phase=Phase.VERIFY,
            name="drill: time to recover",
            ok=ok,
            expected=expected,
            observed=observed,
        )

    # ---- people's requests (the page, a key, `gameday drill ack|hint|stop`) ----
    def _request(self, req: Request, _data: dict[str, Any]) -> str:
        if req is Request.GIVE_UP:
            self._give_up.set()
            return "giving up: the drill cleans up to the baseline"
        with self._lock:
            at = self.clock()
            if at is None or self.bus.status.phase is not DrillPhase.HANDED_OVER:
                return f"the drill is not handed over (phase {self.bus.status.phase.value})"
            if req is Request.ACK:
                if not self.ack.ack(at):
                    return f"already acknowledged at {self.ack.at_s:.1f} s"
                self._note(f"acknowledged at {at:.1f} s", EventKind.ACK, acked_at_s=at)
                return f"acknowledged at {at:.1f} s"
            hint = self.hints.request(at)
            if hint is None:
                return "no hints left"
            self._hint_released(hint.index, hint.text)
            return f"hint {hint.index}: {hint.text}"

    def _result(self, started: datetime) -> ScenarioResult:
        sc = self.ls.scenario
        record = DrillRecord(
            handed_over_at=self.handed_over_at,
            fault_at=self.fault_at,
            time_to_detect_s=self.detected_at_s,
            time_to_acknowledge_s=self.ack.at_s,
            time_to_recover_s=self.recovered_at_s,
            hints=list(self.hints.released),
            actions=self.actions,
            shortcuts=[a for a in self.actions if a.shortcut],
            not_people=self.not_people,
            outcome=self.outcome or DrillOutcome.ERROR,
            detect_within_s=min((a.within_s for a in sc.detect.alerts), default=None),
            recover_within_s=sc.verify.time_to_recover.max_s,
            time_scale=self.ctx.scale.scale,
        )
        base = result(self.ls, self.ctx, started)
        # the scenario's time to detect is the system's (the first alert fires on the lab's
        # scaled clock): real-world, as in a run; its time to recover is the people's, wall
        # seconds as they are (a person's wall second is a real-world second)
        detected = self.detected_at_s
        return base.model_copy(
            update={
                "drill": record,
                "time_to_detect_s": None if detected is None else detected * self.ctx.scale.scale,
                "time_to_recover_s": self.recovered_at_s,
            }
        )


def describe(a: ObservedAction) -> str:
    """An action as a line: a shortcut says so first, with the step's why."""
    if a.shortcut:
        return f"shortcut: {a.step}: {a.why}"
    text = f"{a.kind.value} {', '.join(a.nodes)}: {a.detail}"
    return text + (f" (step: {a.step})" if a.step else "")
