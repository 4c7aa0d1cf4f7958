"""The state one scenario's run carries from phase to phase, and its two ways of waiting: on the
lab's events until a node is in some state (`wait_for`), and on probes until they pass
(`poll_until`). Nothing sleeps blind: a lab event ends a wait early."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from runner.labs.base import Change, ExitInfo, LabDriver, LabEvent, NodeState
from runner.results.schema import ImpactFigures, Phase, Verdict
from runner.run.correctness import References
from runner.run.journal import Journal, OpenStep
from runner.run.load import Judged, LoadWatch, judge, judge_wait, process_watch
from runner.run.probing import Probe, ProbeEnv, ProbeResult, run_probes
from runner.run.record import Recorder
from runner.spec.kinds import NodeStatus, Window
from runner.spec.timing import TimeScale

Progress = Callable[[str], None]
Done = Callable[[NodeState, list[LabEvent]], bool]
POLL_S = 0.05  # how often to look again at what has no events (a log file, the GPU list)
EVENT_LAG_S = 30.0  # how long a wait goes on for events the runtime recorded but has not sent
# How much longer than start_cost_s a node's start (container, interpreter, imports: none of it
# scales with the lab) may take on a loaded machine before a wait timed from it gives up.
START_OVERRUN_S = 30.0
# How many times its window a wait goes on while the machine's CPUs are contended (window_over):
# past it, a wait that found nothing is inconclusive rather than waited for without end.
LOAD_GRACE = 3.0
LOAD_RECHECK_S = 0.1  # how often a wait extended for the machine's load looks at its clock again


def utcnow() -> datetime:
    return datetime.now(UTC)


class ScenarioAborted(Exception):
    """Stop this scenario's remaining phases (the reason is already recorded)."""


@functools.cache
def http_client() -> httpx.Client:
    """The probes' HTTP client, one per process: building one reads and parses the CA bundle
    (30 ms of CPU per scenario in the profile of a suite run). httpx clients are thread-safe, so
    `--parallel` workers share it; it lives as long as the process. It ignores the environment's
    proxies (HTTP_PROXY, ...; trust_env=False), as every client for a lab's own addresses does:
    a proxy would see every probe, and an `http` step's Authorization header with them."""
    return httpx.Client(trust_env=False)


@dataclass(frozen=True)
class Waited:
    state: NodeState  # the node's state when the wait ended
    events: list[LabEvent]  # the node's events seen during the wait
    done: bool  # the predicate held (False: timed out)


@dataclass
class Times:
    """The run's measured times, real-world seconds (None: not measured). What was measured
    before an error stays measured."""

    to_fail: float | None = None
    to_detect: float | None = None  # the first expected alert's
    to_recover: float | None = None


@dataclass
class Context:
    lab: LabDriver
    scale: TimeScale
    journal: Journal
    scenario_id: str
    target: str
    progress: Progress
    rec: Recorder
    http: httpx.Client
    open_changes: list[tuple[int, Change]] = field(default_factory=list)
    # user-written steps run so far (journalled): their undos, or baseline re-applies
    open_steps: list[OpenStep] = field(default_factory=list)
    folder: Path = Path(".")  # the scenario's folder: where its user-written steps run
    # nodes whose engine this run stopped (SIGSTOP) and has not restarted since: their /health
    # still answers 200, so only a restart at cleanup brings them back
    stopped: set[str] = field(default_factory=set)
    # nodes whose kernel log this run wrote a fault to (a GPU XID): rebooted at cleanup
    kernel_logged: set[str] = field(default_factory=set)
    seq: int = 0  # the last lab event this run has seen
    injected_at: datetime | None = None  # the injection began
    # the injected fault is in place: its last change applied (a playbook or a container
    # re-create takes seconds of wall time that the failure must not be charged with)
    fault_at: datetime | None = None
    # its first change in place: an alert may fire on that alone (one node of two moved)
    fault_began_at: datetime | None = None
    inject_seq: int = 0
    restore_at: datetime | None = None  # the (last) restoring recovery step applied
    restored_at: datetime | None = None  # after it, every verify probe passed
    impact: ImpactFigures | None = None  # the scenario's load: what its users felt
    times: Times = field(default_factory=Times)
    # what the baseline's probes recorded for later ones to compare with (the correctness
    # probe's answers), kept for this run only
    references: References = field(default_factory=References)
    # the machine's CPU contention over time: a window missed only by it is inconclusive
    load: LoadWatch = field(default_factory=lambda: process_watch())

    @property
    def boot_timeout_lab(self) -> float:
        return self.scale.boot_timeout_lab(self.lab.inventory.lab)

    @property
    def scrape_interval_lab(self) -> float:
        mon = self.lab.inventory.lab.monitoring
        real = mon.scrape_interval_s if mon else 15.0
        return max(self.scale.to_lab(real), 0.05)

    def wait_for(
        self,
        done: Done,
        lab_timeout: float,
        *,
        node: str | None = None,
        replay_from: int | None = None,
        from_output: float | None = None,
    ) -> Waited:
        """Block on the lab's events until `done(state of node, its events)` or timeout.
        `replay_from`: also count the node's events since that sequence number.
        `from_output`: the lab seconds what is awaited may take from the node's first output.
        The timeout allows start_cost_s for the start before it; a start that takes longer (a
        loaded machine) is waited for, up to START_OVERRUN_S more, so the window is timed from
        the output as the measurement is, not cut short by the machine's load."""
        node = node or self.target
        deadline = time.monotonic() + lab_timeout
        overrun_until = deadline + START_OVERRUN_S
        seen: list[LabEvent] = []
        if replay_from is not None and replay_from < self.seq:
            seen = [
                e
                for e in self.lab.wait_events(replay_from, 0)
                if e.seq <= self.seq and e.node == node
            ]
        lagging_until: float | None = None
        while True:
            st = self.lab.states()[node]
            if done(st, seen):
                return Waited(st, seen, True)
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0 and from_output is not None and now < overrun_until:
                remaining = min(self.starting_for(st, from_output), overrun_until - now)
            if remaining <= 0:
                # what the runtime has recorded and its feed not yet delivered is awaited, a
                # bounded while: a busy daemon sends events late, and the node's exit within the
                # window would be read as no exit at all
                if lagging_until is None:
                    lagging_until = now + EVENT_LAG_S
                if now >= lagging_until or not self.lab.events_behind(node):
                    return Waited(st, seen, False)
                remaining = min(lagging_until - now, POLL_S * 4)
            evs = self._take_events(min(remaining, 5.0))
            seen += [e for e in evs if e.node == node]

    def caught_up(self, node: str | None = None) -> NodeState:
        """The node's state once the lab's feed has delivered what its runtime has recorded
        (a bounded while): a busy daemon sends starts and exits seconds late, and a state read
        meanwhile names an incarnation that has already been followed by another."""
        node = node or self.target
        until = time.monotonic() + EVENT_LAG_S
        while self.lab.events_behind(node) and time.monotonic() < until:
            self._take_events(POLL_S * 4)
        return self.lab.states()[node]

    def _take_events(self, timeout: float) -> list[LabEvent]:
        """The lab's events since the last taken (waiting up to `timeout` for one), recorded."""
        evs = self.lab.wait_events(self.seq, timeout)
        if evs:
            self.seq = evs[-1].seq
            for e in evs:
                self.rec.lab_event(e)
        return evs

    def starting_for(self, st: NodeState, window: float) -> float:
        """Lab seconds a wait timed from the node's first output has left: a node that has not
        yet written its first line is still starting (looked at again within a second); one that
        has is given what remains of `window` since that line. Nothing for a node that is not
        running, or where the lab cannot tell a start from a hang."""
        if st.status not in (NodeStatus.PENDING, NodeStatus.RUNNING):
            return 0.0
        if st.first_output_at is None:
            return 1.0 if self.lab.reports_first_output else 0.0
        return window - (utcnow() - st.first_output_at).total_seconds()

    def pause(self, lab_s: float, *, until_event: bool = False) -> None:
        """Let `lab_s` pass, recording the lab's events meanwhile; with `until_event`, the
        target's next event ends it early."""
        self.wait_for(lambda _s, evs: until_event and bool(evs), lab_s)

    def check_window(
        self,
        phase: Phase,
        name: str,
        window: Window,
        real_s: float,
        observed: str,
        span: tuple[datetime, datetime],
        *,
        expected: str | None = None,
    ) -> Verdict:
        """A time measured over `span` (real-world seconds) against the scenario's window:
        missed only by the machine's contended time within the span, it is inconclusive
        (load.judge), with the evidence in `observed`. `expected`: in place of the window's
        description."""
        judged = judge(self.scale, window, real_s, self.load.stretch(*span))
        return self.rec.verdict(
            phase=phase,
            name=name,
            verdict=judged.verdict,
            expected=expected or self.scale.describe(window),
            observed=observed + judged.evidence,
        )

    def window_over(self, since: datetime, lab_s: float) -> bool:
        """Whether `lab_s` lab seconds since `since` have passed with the machine's contended
        time not counted, so that a wait ended then is judged on time the lab had (load.judge);
        at most LOAD_GRACE times `lab_s` on the wall."""
        st = self.load.stretch(since)
        return st.wall_s - st.stalled_s > lab_s or st.wall_s > LOAD_GRACE * lab_s

    def missed(self, since: datetime, lab_s: float) -> Judged:
        """A wait of `lab_s` lab seconds since `since` that did not see what it waited for
        (load.judge_wait): failed, or inconclusive with the evidence."""
        return judge_wait(lab_s, self.load.stretch(since))

    def probe(
        self, probes: Sequence[Probe], *, record_references: bool = False
    ) -> list[ProbeResult]:
        """`record_references`: the probes record what later ones compare with (the
        baseline's); otherwise they compare with what was recorded, where there is one."""
        env = ProbeEnv(
            http=self.http,
            lab=self.lab,
            scale=self.scale.scale,
            target=self.target,
            since=self.injected_at,
            references=self.references,
            record_references=record_references,
        )
        return run_probes(env, probes)

    def poll_until(
        self,
        probes: Sequence[Probe],
        deadline: float,
        interval: Callable[[], float],
        *,
        until_event: bool = False,
        record_references: bool = False,
    ) -> list[ProbeResult]:
        """Probe until every probe passes or the monotonic `deadline` is past; between tries,
        pause `interval()` lab seconds (what no event announces, an HTTP answer or Prometheus's
        next scrape, is looked at again then)."""
        record = record_references
        results = self.probe(probes, record_references=record)
        while not all_passed(results) and time.monotonic() <= deadline:
            self.pause(interval(), until_event=until_event)
            results = self.probe(probes, record_references=record)
        return results


def all_passed(results: Sequence[ProbeResult]) -> bool:
    return all(r.verdict is Verdict.PASSED for r in results)


def first_exit(events: list[LabEvent]) -> ExitInfo | None:
    """The first exit the node made on its own (not one caused by the lab stopping it)."""
    return next((e.failure for e in events if e.failure is not None), None)
