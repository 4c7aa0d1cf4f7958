"""The compose lab's watch of Docker: a streamed Docker event feed (not polling) turned into the
lab's events (runner.labs.common.events.EventFeed), the incarnations it shows, and readiness.

Each start of a node's engine container is a new incarnation; an exit is the lab's own stop when
it falls inside a stop the driver announced (`stopping`). A worker is ready at its first output;
a server's readiness is probed like the kubelet does.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from runner.errors import LabNotUp
from runner.labs.base import EventType, NodeState
from runner.labs.common import helpers as common
from runner.labs.common.events import EventFeed, Incarnation
from runner.labs.common.helpers import utc_time
from runner.labs.compose.project import LABEL
from runner.spec.inventory import Inventory, Node, Role
from runner.spec.kinds import NodeStatus

PROBE_PERIOD_S = 10.0  # real-world seconds between readiness probes (kubelet's default)
BACKOFF_FIRST_S = 0.1  # Docker's restart delay starts at 100 ms and doubles


def _at_or_before(recorded: datetime, event_ts: datetime) -> datetime:
    """The time Docker recorded for a start or an exit, read when its event is handled. On a busy
    machine the container may have restarted (or exited again) by then, and the record is a later
    one's: the event's own time is the bound."""
    return recorded if recorded <= event_ts else event_ts


def _gameday_node(labels: dict[str, str]) -> str | None:
    """The node of one of the lab's own engine containers."""
    return labels.get("gameday.node", "") if labels.get("gameday.role") == "engine" else None


def _never(ts: str) -> bool:
    return ts.startswith("0001-01-01")


class DockerWatch:
    """The lab's engine containers as Docker's event feed shows them. `docker` and `engine` are
    the driver's (its client, read when used; a node's newest engine container); `generation`
    is a node's generation as the driver records it."""

    def __init__(
        self,
        inventory: Inventory,
        docker: Callable[[], Any],
        engine: Callable[[str], Any],
        generation: Callable[[str], int],
        labels: list[str] | None = None,
        node_of: Callable[[dict[str, str]], str | None] | None = None,
    ) -> None:
        self.inventory = inventory
        # the engine containers' labels and how a container's labels name its node: the lab's
        # own by default; an adopted project's are its Compose labels
        self._labels = labels or [f"{LABEL}={inventory.lab.name}"]
        self._engine_node = node_of or _gameday_node
        self._docker = docker
        self._engine = engine
        self._generation = generation
        self.feed = EventFeed(sync=self.sync)
        self.incs: dict[str, list[Incarnation]] = {}
        self.ready: dict[str, bool] = {}
        # container id -> until when (epoch s) its exits are the lab's own stops. By container and
        # time, not by incarnation number: a restart the event feed has not shown yet when the lab
        # stops the container has no number yet.
        self.stopping: dict[str, float] = {}
        # containers the lab itself is signalling (a scenario's `signal` step): their exits are
        # failures, not stops, whatever signal they got
        self.signalled: set[str] = set()
        self._outside_stop: set[str] = set()  # stopped with SIGTERM; the stop's end not seen yet
        self._events: Any = None
        self._thread: threading.Thread | None = None
        self._closes_at_exit = False
        self._synced = False

    def sync(self) -> None:
        """Open the Docker event feed, then take each node's current state; start readiness
        probes for running engines (a first probe before returning)."""
        if self._synced:
            return
        self._synced = True
        since = time.time()
        self._events = self._docker().api.events(
            since=since - 1,
            decode=True,
            filters={"type": "container", "label": self._labels},
        )
        self._thread = threading.Thread(target=self._watch, name="docker-events", daemon=True)
        self._thread.start()
        if not self._closes_at_exit:
            atexit.register(self.close)
            self._closes_at_exit = True
        for n in self.inventory.nodes:
            with contextlib.suppress(LabNotUp):
                self._take(n, self._engine(n.name))

    def _take(self, n: Node, c: Any) -> None:
        """A node's engine container as it is when the watch opens."""
        st = c.attrs["State"]
        if _never(st["StartedAt"]):
            return
        inc = self._new_incarnation(n.name, c.id, utc_time(st["StartedAt"]))
        if not st["Running"] and not _never(st["FinishedAt"]):
            inc.finished_at = utc_time(st["FinishedAt"])
            inc.code = int(st["ExitCode"])
        elif st["Running"]:
            self.ready[n.name] = self._probe_once(n, c)
            self._watch_incarnation(n, inc, c)

    def close(self) -> None:
        """Close the event feed and wait for its thread: one still reading a socket when the
        interpreter finalises can take the process down (a CLI verb then exits -11, SIGSEGV)."""
        if self._events is not None:
            with contextlib.suppress(Exception):
                self._events.close()
            self._events = None
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._thread = None
        self._synced = False

    def _node_of(self, attrs: dict[str, str]) -> Node | None:
        name = self._engine_node(attrs)
        if name is None:
            return None
        try:
            return self.inventory.node(name)
        except KeyError:
            return None

    def _watch(self) -> None:
        feed = self._events
        with contextlib.suppress(Exception):
            for ev in feed:
                action = ev.get("Action") or ev.get("status", "")
                node = self._node_of(ev.get("Actor", {}).get("Attributes", {}))
                if node is None or action not in ("start", "die", "kill"):
                    continue
                cid = ev.get("id") or ev["Actor"]["ID"]
                ts = datetime.fromtimestamp(ev["timeNano"] / 1e9, UTC)
                if action == "start":
                    self.on_start(node, cid, ts)
                elif action == "kill":
                    self.on_kill(cid, ev["Actor"].get("Attributes", {}))
                else:
                    self.on_die(node, cid, ev["Actor"]["Attributes"], ts)

    def _new_incarnation(self, node: str, cid: str, started: datetime) -> Incarnation:
        incs = self.incs.setdefault(node, [])
        inc = Incarnation(len(incs) + 1, cid, started)
        incs.append(inc)
        return inc

    def current(self, node: str) -> Incarnation | None:
        incs = self.incs.get(node)
        return incs[-1] if incs else None

    def on_start(self, node: Node, cid: str, ts: datetime) -> None:
        try:
            c = self._docker().containers.get(cid)
            started = _at_or_before(utc_time(c.attrs["State"]["StartedAt"]), ts)
        except Exception:
            return
        cur = self.current(node.name)
        if cur is not None and cur.container_id == cid and started <= cur.started_at:
            return  # seen at sync, or replayed from before it
        inc = self._new_incarnation(node.name, cid, started)
        self.ready[node.name] = False
        self.feed.emit(
            node.name,
            EventType.STARTED,
            started,
            incarnation=inc.number,
            pid=c.attrs["State"].get("Pid"),
            generation=self._generation(node.name),
        )
        self._watch_incarnation(node, inc, c)

    def on_kill(self, cid: str, attrs: dict[str, str]) -> None:
        """Docker's SIGTERM to a container (`docker stop`, `docker restart`, from gameday or from
        anyone): its next exit is a stop, not a failure. A signal the lab sends as a scenario's
        fault is not."""
        if cid in self.signalled:
            self.signalled.discard(cid)
            return
        if attrs.get("signal") in ("15", "SIGTERM", "TERM"):
            self.stopping[cid] = math.inf
            self._outside_stop.add(cid)

    def on_die(self, node: Node, cid: str, attrs: dict[str, str], ts: datetime) -> None:
        inc = self.current(node.name)
        if inc is None or inc.container_id != cid or inc.finished_at is not None:
            return
        if ts < inc.started_at:
            return  # replayed from before the start the lab knows (the feed opens 1 s early)
        finished, status, restarts = ts, "", 0
        with contextlib.suppress(Exception):
            st = self._docker().containers.get(cid).attrs
            if not _never(st["State"]["FinishedAt"]):
                # Docker's recorded exit time, unless it is already a later exit's
                finished = _at_or_before(utc_time(st["State"]["FinishedAt"]), ts)
            status = st["State"]["Status"]
            restarts = int(st.get("RestartCount", 0))
        inc.finished_at = finished
        inc.code = int(attrs.get("exitCode", "0"))
        inc.stopped = ts.timestamp() <= self.stopping.get(cid, -math.inf)
        if cid in self._outside_stop:
            # that stop is over: a later exit of the same container (`docker restart` keeps it)
            # is its own again
            self._outside_stop.discard(cid)
            self.stopping[cid] = ts.timestamp()
        self.ready[node.name] = False
        self.feed.emit(node.name, EventType.EXITED, finished, **inc.exited())
        if status == "restarting":
            self.feed.emit(
                node.name,
                EventType.BACKOFF,
                finished,
                delay_s=BACKOFF_FIRST_S * 2 ** max(restarts - 1, 0),
                restarts=restarts,
            )

    def behind(self, node: str, c: Any) -> bool:
        """Docker has recorded a start or an exit of the node's engine container `c` (None: it
        has none) that the event feed has not shown yet."""
        if c is None:
            return False
        st = c.attrs["State"]
        if _never(st["StartedAt"]):
            return False
        cur = self.current(node)
        if cur is None or cur.container_id != c.id:
            return True  # a container whose start the feed has not shown
        if utc_time(st["StartedAt"]) > cur.started_at:
            return True  # restarted since the start the feed showed
        exited = not st["Running"] or st.get("Restarting", False)
        return exited and cur.finished_at is None and not _never(st["FinishedAt"])

    def state_of(self, n: Node, c: Any, generation: int) -> NodeState:
        """The node's state: its engine container `c` (None: none) as Docker has it now, with
        the incarnations and readiness the watch saw."""
        if c is None:
            return common.pending(n.name, 0, "no container")
        st = c.attrs["State"]
        status = {
            "running": NodeStatus.RUNNING,
            "paused": NodeStatus.RUNNING,
            "restarting": NodeStatus.CRASH_LOOPING,
            "exited": NodeStatus.EXITED,
            "dead": NodeStatus.EXITED,
        }.get(st["Status"], NodeStatus.PENDING)
        incs = self.incs.get(n.name, [])
        reason = {
            NodeStatus.CRASH_LOOPING: "CrashLoopBackOff",
            NodeStatus.EXITED: "Completed" if st.get("ExitCode") == 0 else "Error",
        }.get(status, "")
        return common.node_state(
            n.name,
            status,
            generation=generation,
            restarts=int(c.attrs.get("RestartCount", 0)),
            ready=self.ready.get(n.name, False),
            reason=reason,
            current=incs[-1] if incs else None,
            incarnations=incs,
            pid=st.get("Pid") or None,
        )

    def _watch_incarnation(self, node: Node, inc: Incarnation, container: Any) -> None:
        threading.Thread(
            target=self._follow_first_output, args=(node, inc, container), daemon=True
        ).start()
        if node.role is not Role.WORKER:
            threading.Thread(target=self._probe_loop, args=(node, inc), daemon=True).start()

    def _follow_first_output(self, node: Node, inc: Incarnation, container: Any) -> None:
        """Follow the incarnation's log until its first line (a headless worker is ready then)."""
        with contextlib.suppress(Exception):
            stream = container.logs(
                stream=True, follow=True, timestamps=True, since=int(inc.started_at.timestamp())
            )
            try:
                for raw in stream:
                    ts_text, _, _ = raw.decode(errors="replace").partition(" ")
                    ts = utc_time(ts_text)
                    if ts < inc.started_at:
                        continue
                    inc.first_output_at = ts
                    self.feed.emit(node.name, EventType.FIRST_OUTPUT, ts, incarnation=inc.number)
                    if node.role is Role.WORKER and inc.finished_at is None:
                        self.ready[node.name] = True
                        self.feed.emit(node.name, EventType.READY, ts, incarnation=inc.number)
                    return
            finally:
                with contextlib.suppress(Exception):
                    stream.close()

    def _probe_loop(self, node: Node, inc: Incarnation) -> None:
        period = max(PROBE_PERIOD_S / self.inventory.lab.time_scale, 0.02)
        with httpx.Client(timeout=max(period, 0.5), trust_env=False) as http:
            while inc.finished_at is None and self._synced:
                try:
                    ok = http.get(node.url + node.health_path).status_code == 200
                except httpx.HTTPError:
                    ok = False
                cur = self.current(node.name)
                if cur is not inc or inc.finished_at is not None:
                    return
                if ok != self.ready.get(node.name, False):
                    self.ready[node.name] = ok
                    ev = EventType.READY if ok else EventType.UNREADY
                    self.feed.emit(node.name, ev, datetime.now(UTC), incarnation=inc.number)
                time.sleep(period)

    def _probe_once(self, node: Node, container: Any) -> bool:
        if node.role is Role.WORKER:
            return bool(container.logs(tail=1))
        try:
            return (
                httpx.get(node.url + node.health_path, timeout=2, trust_env=False).status_code
                == 200
            )
        except httpx.HTTPError:
            return False
