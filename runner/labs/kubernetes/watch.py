"""The Kubernetes lab's watch of its pods: one list of the lab's pods, then a watch from its
resourceVersion (an informer's cache: the driver's `states()` reads it, no polling), turned into
the lab's events (runner.labs.common.events.EventFeed).

Incarnations are containers: each (pod, restartCount) the watch shows running is one. Its exit
comes from the container status (`lastState.terminated`: exit code, reason, finish time); its
logs from `previous` while it is the pod's last terminated container, and from the watch's copy
after that (Kubernetes keeps one previous container; the watch keeps the logs of every exit it
saw). The kubelet records start and finish times in whole seconds; the container's own log
timestamps (nanoseconds) refine them: first output is the first log line, and the exit is the
last log line when that falls inside the recorded second.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.errors import LabError
from runner.labs.base import EventType, LogLine, NodeState
from runner.labs.common import helpers as common
from runner.labs.common.events import EventFeed, Incarnation
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes.api import KubeApi
from runner.spec.inventory import Inventory, Node
from runner.spec.kinds import NodeStatus


def as_utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt.astimezone(UTC) if dt.tzinfo else dt.replace(tzinfo=UTC)


@dataclass
class Container(Incarnation):
    """An incarnation on Kubernetes: one container of a node's pod, (pod, restartCount)."""

    pod: str = ""
    # a StatefulSet's replacement pod has the old one's name: the uid tells them apart
    pod_uid: str = ""
    restart_count: int = 0
    reason: str = ""
    logs: list[LogLine] | None = None  # kept once it has exited
    # its log was gone before the watch read it: the kubelet keeps the current container's and
    # the previous one's only, and a crash loop faster than the watch moved past it
    logs_lost: bool = False


@dataclass
class NodeView:
    pod: Any = None  # the node's pod (the client's V1Pod): the newest not being deleted
    pods: dict[str, Any] = field(default_factory=dict)  # every pod of the node there is, by uid
    first_seen: dict[str, int] = field(default_factory=dict)
    pods_seen: int = 0
    incs: list[Container] = field(default_factory=list)
    backoff_for: int = -1  # restartCount a BACKOFF event was emitted for
    ready: bool = False


class PodWatch:
    """The lab's pods by node, as the list and the watch show them. `feed` is the driver's."""

    def __init__(self, inventory: Inventory, kube: KubeApi, feed: EventFeed) -> None:
        self.inventory = inventory
        self.kube = kube
        self.ns = kube.ns
        self.feed = feed
        self.views: dict[str, NodeView] = {n.name: NodeView() for n in inventory.nodes}
        # which pods are the lab's and the engine's container in them: the lab's own labels
        # and container by default; an adopted workload's selector and container otherwise
        self.selector = mf.selector(inventory)
        self.container = mf.CONTAINER
        self.adopted_node: str | None = None  # every selected pod is this node's
        self._expect_stop: dict[str, int] = {}
        self.synced = False
        self.stop = threading.Event()
        self._watch_obj: Any = None
        self._watch_thread: threading.Thread | None = None

    def sync(self, timeout_s: float) -> None:
        """List the lab's pods, then watch from that list's resourceVersion (re-opened after
        `timeout_s`)."""
        pods = self.kube.call(
            "list pods",
            self.kube.core.list_namespaced_pod,
            self.ns,
            label_selector=self.selector,
        )
        for p in sorted(pods.items, key=lambda p: p.metadata.creation_timestamp):
            self._on_pod("ADDED", p, initial=True)
        self.synced = True
        self.stop.clear()
        self._watch_thread = threading.Thread(
            target=self.loop,
            args=(pods.metadata.resource_version, timeout_s),
            name="kube-watch",
            daemon=True,
        )
        self._watch_thread.start()
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the watch thread and wait for it: one still reading when the interpreter exits
        can take the process down with it (the client's models are Rust-backed)."""
        self.stop.set()
        w = self._watch_obj
        if w is not None:
            with contextlib.suppress(Exception):
                w.stop()
            resp: Any = getattr(w, "_resp", None)  # the open watch response: unblock its read
            with contextlib.suppress(Exception):
                resp.shutdown()
        thread = self._watch_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._watch_thread = None
        self.synced = False

    def loop(self, rv: str, timeout_s: float) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self.stop.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            self._watch_obj = w
            try:
                for ev in w.stream(  # type: ignore[no-untyped-call]
                    self.kube.core.list_namespaced_pod,
                    self.ns,
                    label_selector=self.selector,
                    resource_version=rv,
                    timeout_seconds=timeout_s,
                    allow_watch_bookmarks=False,
                    _request_timeout=self.kube.watch_timeout(timeout_s),
                ):
                    if self.stop.is_set():
                        return
                    obj = ev["object"]
                    rv = obj.metadata.resource_version or rv
                    self._on_pod(ev["type"], obj)
            except ApiException as exc:
                if exc.status == 410:  # too old: list again
                    with contextlib.suppress(Exception):
                        rv = self.kube.core.list_namespaced_pod(
                            self.ns,
                            label_selector=self.selector,
                            _request_timeout=self.kube.spec.request_timeout_s,
                        ).metadata.resource_version
                    continue
                time.sleep(0.2)
            except Exception:
                if self.stop.is_set():
                    return
                time.sleep(0.2)  # the connection dropped: re-open from the last version

    def _node_of(self, pod: Any) -> str | None:
        if self.adopted_node is not None:
            return self.adopted_node
        name = (pod.metadata.labels or {}).get(mf.NODE_LABEL)
        return name if name in self.views else None

    def _on_pod(self, type_: str, pod: Any, initial: bool = False) -> None:
        node = self._node_of(pod)
        if node is None:
            return
        with self.feed.cond:
            v = self.views[node]
            uid = pod.metadata.uid
            if type_ == "DELETED":
                self._pod_gone(node, pod)
                v.pods.pop(uid, None)
            else:
                if uid not in v.first_seen:
                    v.pods_seen += 1
                    v.first_seen[uid] = v.pods_seen
                v.pods[uid] = pod
            # the node's pod: one not being deleted before one that is, then the newest
            v.pod = max(
                v.pods.values(),
                key=lambda p: (p.metadata.deletion_timestamp is None, v.first_seen[p.metadata.uid]),
                default=None,
            )
            self.feed.cond.notify_all()
        if type_ != "DELETED":
            self._container_changes(node, pod, initial)

    def _container_status(self, pod: Any) -> Any | None:
        for cs in pod.status.container_statuses or [] if pod.status else []:
            if cs.name == self.container:
                return cs
        return None

    def inc(self, node: str, pod: Any, restart_count: int) -> Container | None:
        """The incarnation of that pod's container `restart_count` (the client's V1Pod)."""
        for inc in self.views[node].incs:
            if inc.pod_uid == pod.metadata.uid and inc.restart_count == restart_count:
                return inc
        return None

    def _container_changes(self, node: str, pod: Any, initial: bool) -> None:
        cs = self._container_status(pod)
        if cs is None:
            return
        last = cs.last_state.terminated if cs.last_state else None
        # the container before this one: it exited (seen now, or missed between two updates)
        if last is not None and cs.restart_count > 0:
            inc, _ = self._inc_of(
                node, pod, cs.restart_count - 1, last.container_id, last.started_at
            )
            if inc.finished_at is None:
                self._exited(node, pod, inc, last, initial=initial)
        state = cs.state
        if state.running is not None:
            self._running(node, pod, cs, initial)
        elif state.terminated is not None:
            term = state.terminated
            inc, _ = self._inc_of(node, pod, cs.restart_count, term.container_id, term.started_at)
            if inc.finished_at is None:
                self._exited(node, pod, inc, state.terminated, initial=initial)
            self.views[node].ready = False
        elif state.waiting is not None:
            self.views[node].ready = False
            self._waiting(node, cs, initial)

    def _running(self, node: str, pod: Any, cs: Any, initial: bool) -> None:
        """The pod's container `cs` runs: a new incarnation, and a change of readiness."""
        name = pod.metadata.name
        v = self.views[node]
        inc, new = self._inc_of(
            node, pod, cs.restart_count, cs.container_id, cs.state.running.started_at
        )
        if new and not initial:
            self.feed.emit(
                node,
                EventType.STARTED,
                inc.started_at,
                incarnation=inc.number,
                pid=None,
                pod=name,
                generation=v.pods_seen,
            )
        current = v.pod is not None and v.pod.metadata.uid == pod.metadata.uid
        if not current or bool(cs.ready) == v.ready:
            return
        v.ready = bool(cs.ready)
        if v.ready and inc.first_output_at is None:
            # ready means it has logged: its first line is the incarnation's first output
            logs = self.read_log(name, previous=False)
            if logs:
                inc.first_output_at = logs[0].ts
        if not initial:
            self.feed.emit(
                node,
                EventType.READY if v.ready else EventType.UNREADY,
                datetime.now(UTC),
                incarnation=inc.number,
            )

    def _waiting(self, node: str, cs: Any, initial: bool) -> None:
        """The pod's container `cs` waits: a back-off, once per restart."""
        v = self.views[node]
        waiting = cs.state.waiting
        if waiting.reason != "CrashLoopBackOff" or v.backoff_for == cs.restart_count:
            return
        v.backoff_for = cs.restart_count
        if initial:
            return
        m = re.search(r"back-off (\d+(?:\.\d+)?)(m?s)", waiting.message or "")
        delay = float(m.group(1)) * (0.001 if m and m.group(2) == "ms" else 1) if m else 0
        self.feed.emit(
            node,
            EventType.BACKOFF,
            datetime.now(UTC),
            delay_s=delay / self.inventory.lab.time_scale,
            restarts=cs.restart_count,
        )

    def _inc_of(
        self, node: str, pod: Any, rc: int, cid: str | None, started: datetime | None
    ) -> tuple[Container, bool]:
        """The incarnation of the pod's container `rc`, and whether it is new (unseen so far)."""
        found = self.inc(node, pod, rc)
        if found is not None:
            return found, False
        incs = self.views[node].incs
        inc = Container(
            number=len(incs) + 1,
            container_id=cid or "",
            started_at=as_utc(started) or datetime.now(UTC),
            pod=pod.metadata.name,
            pod_uid=pod.metadata.uid,
            restart_count=rc,
        )
        incs.append(inc)
        return inc, True

    def read_log(self, pod: str, previous: bool) -> list[LogLine] | None:
        """The container's log with the kubelet's timestamps; None when there is none (400: no
        previous container / still waiting; 404: pod gone)."""
        status, text = self.kube.status_of(
            self.kube.core.read_namespaced_pod_log,
            pod,
            self.ns,
            container=self.container,
            previous=previous,
            timestamps=True,
        )
        if status != 200:
            return None
        return common.stamped_lines(str(text))

    def _status(self, pod: str) -> Any:
        """The pod's engine container status as the API server has it now (None: pod gone)."""
        status, obj = self.kube.status_of(self.kube.core.read_namespaced_pod, pod, self.ns)
        return self._container_status(obj) if status == 200 else None

    def _which(self, pod: str, container_id: str, cs: Any = None) -> bool | None:
        """Whether the pod's log endpoint serves that container as `previous` (True), as the
        current one (False: it is the last container, terminated), or not at all (None). `cs`:
        the container status already read (read now otherwise)."""
        cs = cs if cs is not None else self._status(pod)
        if cs is None or not container_id:
            return None
        if cs.state.terminated is not None and cs.state.terminated.container_id == container_id:
            return False
        if cs.state.running is not None and cs.container_id == container_id:
            return False
        last = cs.last_state.terminated if cs.last_state else None
        if last is not None and last.container_id == container_id:
            return cs.state.waiting is None  # in back-off the last one is also the current one
        return None

    def _dropped(self, pod: str, container_id: str) -> bool:
        """Whether the kubelet has moved past that container: the pod is there, with a later
        current and previous container. Not for a pod that is gone, nor a container without an
        id (a status the kubelet could not report), whose logs are not coming back either but
        for which no later container of the pod stands in."""
        if not container_id:
            return False
        cs = self._status(pod)
        return cs is not None and self._which(pod, container_id, cs) is None

    def _container_log(self, pod: str, container_id: str) -> list[LogLine] | None:
        """One container's log: the kubelet serves the current and the previous container, and
        the pod may move on between two calls, so which one is asked for is checked again
        after reading."""
        for _ in range(4):
            which = self._which(pod, container_id)
            if which is None:
                return None
            lines = self.read_log(pod, previous=which)
            if self._which(pod, container_id) == which:
                return lines
        return None

    def _exited(self, node: str, pod: Any, inc: Container, term: Any, initial: bool) -> None:
        read = self._container_log(pod.metadata.name, term.container_id or "")
        logs = read or []
        finished = as_utc(term.finished_at) or datetime.now(UTC)
        if logs:
            inc.first_output_at = inc.first_output_at or logs[0].ts
            # the kubelet's finish time has whole seconds: the last line inside that second is
            # a closer bound
            if finished <= logs[-1].ts < finished + timedelta(seconds=1):
                finished = logs[-1].ts
        inc.logs = logs
        inc.finished_at = finished
        inc.code = int(term.exit_code)
        inc.reason = term.reason or ""
        # a container of a pod being deleted (a restart, a re-applied Deployment) was stopped,
        # whatever its exit code; so were the ones running when the lab re-applied the node
        inc.stopped = (
            pod.metadata.deletion_timestamp is not None
            or inc.number <= self._expect_stop.get(node, 0)
        )
        # a failed container's log the kubelet dropped while the watch was behind (a crash loop
        # faster than the watch): the same pod's next failure stands in for it (stand_in)
        inc.logs_lost = (
            read is None
            and not inc.stopped
            and self._dropped(pod.metadata.name, term.container_id or "")
        )
        if initial:
            return
        self.feed.emit(node, EventType.EXITED, finished, reason=inc.reason, **inc.exited())

    def _pod_gone(self, node: str, pod: Any) -> None:
        """A deleted pod's containers are gone; one still running when the pod went is a stop."""
        for inc in self.views[node].incs:
            if inc.pod_uid == pod.metadata.uid and inc.finished_at is None:
                inc.finished_at = datetime.now(UTC)
                inc.code = 137
                inc.stopped = True
                inc.logs = inc.logs or []

    def stand_in(self, node: str, inc: Container) -> tuple[bool, Container | None]:
        """For a container whose log was lost: whether it is settled, and the same pod's next
        container that exited with the same code and a log (None: none, or not yet). A pod's
        containers run one spec, so in a crash loop the next failure is the same one. Settled
        with none where none can come: another pod, a container the lab stopped, another exit
        code, an empty log; not settled while the next one runs."""
        if not inc.logs_lost:
            return True, None
        for later in self.views[node].incs[inc.number :]:
            if later.pod_uid != inc.pod_uid:
                continue  # another pod's container (a surge pod, a replacement)
            if later.finished_at is None:
                return False, None  # it runs: it may fail the same way
            if later.stopped:
                return True, None
            if later.logs_lost:
                continue
            if later.code != inc.code or not later.logs:
                return True, None
            return True, later
        return False, None

    def state_of(self, n: Node) -> NodeState:
        v = self.views[n.name]
        pod = v.pod
        cs = self._container_status(pod) if pod is not None else None
        if pod is None or cs is None:
            reason = "no pod"
            if pod is not None:
                conds = {c.type: c for c in pod.status.conditions or []} if pod.status else {}
                sched = conds.get("PodScheduled")
                reason = (
                    (sched.message or sched.reason)
                    if sched and sched.status == "False"
                    else (pod.status.phase if pod.status else "Pending")
                )
            name = pod.metadata.name if pod is not None else None
            return common.pending(n.name, v.pods_seen, reason or "", pod=name)
        state = cs.state
        terminating = pod.metadata.deletion_timestamp is not None
        if state.running is not None:
            status, reason = NodeStatus.RUNNING, "Terminating" if terminating else "Running"
        elif state.terminated is not None:
            status, reason = NodeStatus.EXITED, state.terminated.reason or "Terminated"
        elif state.waiting is not None and state.waiting.reason == "CrashLoopBackOff":
            status, reason = NodeStatus.CRASH_LOOPING, "CrashLoopBackOff"
        else:
            status = NodeStatus.PENDING
            reason = state.waiting.reason if state.waiting else "Pending"
        return common.node_state(
            n.name,
            status,
            generation=v.pods_seen,
            restarts=int(cs.restart_count),
            ready=bool(cs.ready) and not terminating,
            reason=reason or "",
            current=self.inc(n.name, pod, cs.restart_count),
            incarnations=v.incs,
            pod=pod.metadata.name,
        )

    def wait_replacing(self, old: dict[str, str], timeout: float = 60) -> None:
        """Until the watch shows each node's old pod terminating or gone: from then on, the
        node's state is the new pod's, not the old one's last word."""

        def replacing() -> bool:
            for node, uid in old.items():
                pod = self.views[node].pod
                if (
                    pod is not None
                    and pod.metadata.uid == uid
                    and pod.metadata.deletion_timestamp is None
                ):
                    return False
            return True

        with self.feed.cond:
            if not self.feed.cond.wait_for(replacing, timeout):
                raise LabError(
                    f"{', '.join(old)}: the old pod is neither terminating nor replaced after "
                    f"{timeout:.0f} s",
                    hint=f"kubectl -n {self.ns} get pods",
                )

    def wait_gone(self, old: dict[str, str], timeout: float) -> None:
        """Until the watch shows each node's old pod deleted: its container has stopped."""

        def gone() -> bool:
            return all(uid not in self.views[node].pods for node, uid in old.items())

        with self.feed.cond:
            if not self.feed.cond.wait_for(gone, timeout):
                raise LabError(
                    f"{', '.join(old)}: the old pod is still there after {timeout:.0f} s",
                    hint=f"kubectl -n {self.ns} get pods",
                )

    def wait_successor(self, old: dict[str, str], timeout: float) -> None:
        """Until the watch shows a pod other than each node's old one: its controller has
        created the replacement, so the node has a pod to restart, read or judge."""

        def created() -> bool:
            return all(
                any(uid != gone for uid in self.views[node].pods) for node, gone in old.items()
            )

        with self.feed.cond:
            if not self.feed.cond.wait_for(created, timeout):
                raise LabError(
                    f"{', '.join(old)}: no new pod after {timeout:.0f} s",
                    hint=f"kubectl -n {self.ns} get events --sort-by=.lastTimestamp",
                )

    def expect_stop_now(self, nodes: Sequence[str]) -> None:
        with self.feed.cond:
            for n in nodes:
                incs = self.views[n].incs
                self._expect_stop[n] = incs[-1].number if incs else 0
