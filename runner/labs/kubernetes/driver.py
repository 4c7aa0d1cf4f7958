"""The Kubernetes lab's driver, on the official `kubernetes` client. Implements
runner.labs.base.LabDriver.

Plain API use, so that what the tests exercise (against tests/kubeapi, a stand-in API server)
is what a real cluster receives: create / replace / delete of the lab's Namespace, Services,
Deployments (single-node servers) and StatefulSets (the ranks of a tensor-parallel group); one
list of the lab's pods, then a watch from its resourceVersion (an informer's cache: `states()`
reads it, no polling); pod logs with `timestamps=true`, current and
`previous`; Events of a pod.

Incarnations are containers: each (pod, restartCount) the watch shows running is one. Its exit
comes from the container status (`lastState.terminated`: exit code, reason, finish time); its
logs from `previous` while it is the pod's last terminated container, and from the driver's copy
after that (Kubernetes keeps one previous container; the driver keeps the logs of every exit it
saw). The kubelet records start and finish times in whole seconds; the container's own log
timestamps (nanoseconds) refine them: first output is the first log line, and the exit is the
last log line when that falls inside the recorded second.

Blast radius: the driver acts only in a namespace labelled `gameday.io/lab=<lab name>` (it
labels the ones it creates), unless GAMEDAY_ALLOW_NAMESPACE names that namespace; it deletes
only objects carrying its labels, and the namespace only if it created it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from urllib3.util.retry import Retry

from runner.errors import InventoryError, LabError, LabNotUp
from runner.inventory import Inventory, Node
from runner.labs import common
from runner.labs.base import (
    Capability,
    Change,
    ChangeKind,
    EventType,
    LabDriver,
    LabEvent,
    LogLine,
    NodeConfig,
    NodeState,
    ProcessState,
    RuntimeEvent,
    Value,
)
from runner.labs.events import EventFeed, Incarnation
from runner.labs.kubernetes import manifests as mf
from runner.scenario import LabKind, NodeStatus
from runner.timing import TimeScale

ALLOW_ENV = "GAMEDAY_ALLOW_NAMESPACE"
WATCH_TIMEOUT_S = 240  # a watch is re-opened from the last resourceVersion after this
T = TypeVar("T")


def _utc(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt.astimezone(UTC) if dt.tzinfo else dt.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Calls:
    kind: str
    read: Callable[..., Any]
    create: Callable[..., Any]
    replace: Callable[..., Any]


@dataclass
class Container(Incarnation):
    """An incarnation on Kubernetes: one container of a node's pod, (pod, restartCount)."""

    pod: str = ""
    restart_count: int = 0
    reason: str = ""
    logs: list[LogLine] | None = None  # kept once it has exited


@dataclass
class NodeView:
    pod: Any = None  # the node's pod (the client's V1Pod): the newest not being deleted
    pods: dict[str, Any] = field(default_factory=dict)  # every pod of the node there is, by uid
    first_seen: dict[str, int] = field(default_factory=dict)
    pods_seen: int = 0
    incs: list[Container] = field(default_factory=list)
    backoff_for: int = -1  # restartCount a BACKOFF event was emitted for
    ready: bool = False


class KubernetesLab(LabDriver):
    kind = LabKind.KUBERNETES
    label = "kubernetes lab"
    capabilities = frozenset({Capability.SERVICE_LINKS})

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.spec = mf.spec_of(inventory)
        self.ns = self.spec.namespace
        lab = inventory.lab
        self._state_dir = common.state_dir(lab)
        self.artifacts_dir: Path | None = None
        self._client: Any = None
        self.feed = EventFeed(sync=self._sync)
        self._views: dict[str, NodeView] = {n.name: NodeView() for n in inventory.nodes}
        self._expect_stop: dict[str, int] = {}
        self._synced = False
        self._stop = threading.Event()
        self._watch_obj: Any = None
        self._watch_thread: threading.Thread | None = None
        self._guarded = False

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    # ---- the API -----------------------------------------------------------------------------

    @property
    def api(self) -> Any:
        if self._client is None:
            from kubernetes import config
            from kubernetes.config.config_exception import ConfigException

            cfg_file = None
            if self.spec.kubeconfig:
                cfg_file = str((self.inventory.path.parent / self.spec.kubeconfig).resolve())
                if not Path(cfg_file).exists():
                    raise InventoryError(
                        f"kubeconfig {cfg_file} does not exist",
                        file=self.inventory.path,
                        field="all.vars.gameday_lab.kubernetes.kubeconfig",
                        hint="point it at your cluster's kubeconfig (aws eks update-kubeconfig "
                        "writes one), or leave it out to use $KUBECONFIG / ~/.kube/config",
                    )
            from kubernetes import client

            try:
                cfg = client.Configuration()
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=cfg_file,
                    context=self.spec.context,
                    client_configuration=cfg,
                    persist_config=False,
                )
                # urllib3's default of three retries, but none for a read that timed out:
                # three more tries would make every timeout four times as long
                cfg.retries = Retry(total=3, read=0)
                self._client = client.ApiClient(cfg)
            except (ConfigException, OSError, TypeError) as exc:
                raise InventoryError(
                    f"cannot load the kubeconfig: {exc}",
                    file=self.inventory.path,
                    field="all.vars.gameday_lab.kubernetes",
                    hint="check kubeconfig and context in the inventory",
                ) from None
        return self._client

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.api)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One API call, its failures mapped to LabError naming the call and the server."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.spec.request_timeout_s)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise LabError(
                f"Kubernetes API: {what} failed: {exc.status} {exc.reason}: {_api_message(exc)}",
                hint=f"namespace {self.ns}; context {self.spec.context or '(current)'}",
            ) from None
        except HTTPError as exc:
            raise LabError(
                f"the Kubernetes API server is not reachable ({what}): {type(exc).__name__}",
                hint=f"is the cluster up? server {self.api.configuration.host}",
            ) from None

    def _watch_timeout(self, server_s: float) -> tuple[float, float]:
        """(connect, read) timeouts of a watch the server ends after `server_s`: a server that
        stops answering (a dropped connection, a hung API server) ends it a little later."""
        return (self.spec.request_timeout_s, server_s + self.spec.request_timeout_s)

    def _status_of(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
        """(HTTP status, object): 200 with the object, or the error status with None."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.spec.request_timeout_s)
        try:
            return 200, fn(*args, **kwargs)
        except ApiException as exc:
            return int(exc.status or 0), None
        except HTTPError as exc:
            raise LabError(
                f"the Kubernetes API server is not reachable: {type(exc).__name__}",
                hint=f"is the cluster up? server {self.api.configuration.host}",
            ) from None

    # ---- the blast-radius guard ---------------------------------------------------------------

    def _namespace(self) -> Any | None:
        status, ns = self._status_of(self.core.read_namespace, self.ns)
        if status == 404:
            return None
        if status != 200:
            self.call("read namespace", self.core.read_namespace, self.ns)
        return ns

    def guard(self, ns: Any) -> None:
        """InventoryError (exit 2) for a namespace not marked as this lab's."""
        if self._guarded:
            return
        got = (ns.metadata.labels or {}).get(mf.LAB_LABEL)
        if got != self.inventory.lab.name and os.environ.get(ALLOW_ENV) != self.ns:
            raise InventoryError(
                f"namespace {self.ns!r} is not a lab namespace (label "
                f"{mf.LAB_LABEL}={self.inventory.lab.name} "
                + (f"is {got!r}" if got else "is missing")
                + "): gameday does not inject faults there",
                file=self.inventory.path,
                field="all.vars.gameday_lab.kubernetes.namespace",
                hint=f"use a namespace of its own (gameday creates and labels it), or label this "
                f"one: kubectl label namespace {self.ns} {mf.LAB_LABEL}={self.inventory.lab.name}; "
                f"to override once: {ALLOW_ENV}={self.ns}",
            )
        self._guarded = True

    def _require_lab_namespace(self) -> None:
        """LabNotUp without the namespace; the guard's refusal for one not marked as a lab. Read
        once: a namespace that passed stays this driver's."""
        if self._guarded:
            return
        ns = self._namespace()
        if ns is None:
            raise LabNotUp(
                f"kubernetes lab {self.inventory.lab.name!r}: namespace {self.ns} does not exist",
                hint=f"gameday lab up --lab {self.inventory.path}",
            )
        self.guard(ns)

    # ---- lifecycle ---------------------------------------------------------------------------

    def is_up(self) -> bool:
        ns = self._namespace()
        if ns is None:
            return False
        self.guard(ns)
        return self._workloads_exist()

    def _workloads_exist(self) -> bool:
        return all(
            self._status_of(self._calls(n).read, n.name, self.ns)[0] == 200
            for n in self.inventory.nodes
        )

    def _calls(self, node: Node) -> Calls:
        """The API calls of the node's workload: a Deployment, or a group rank's StatefulSet."""
        a = self.apps
        if mf.is_grouped(node):
            return Calls(
                "statefulset",
                a.read_namespaced_stateful_set,
                a.create_namespaced_stateful_set,
                a.replace_namespaced_stateful_set,
            )
        return Calls(
            "deployment",
            a.read_namespaced_deployment,
            a.create_namespaced_deployment,
            a.replace_namespaced_deployment,
        )

    def up(self) -> None:
        ns = self._namespace()
        if ns is not None:
            self.guard(ns)
            if self._workloads_exist():
                self._sync()
                return
        created_ns = ns is None
        try:
            if created_ns:
                self.call(
                    "create namespace", self.core.create_namespace, mf.namespace(self.inventory)
                )
                self._guarded = True
            svc = mf.service(self.inventory)
            status, _ = self._status_of(
                self.core.read_namespaced_service, self.spec.service, self.ns
            )
            if status == 404:
                self.call("create service", self.core.create_namespaced_service, self.ns, svc)
            for group in mf.groups(self.inventory):
                status, _ = self._status_of(self.core.read_namespaced_service, group, self.ns)
                if status == 404:
                    self.call(
                        f"create headless service {group}",
                        self.core.create_namespaced_service,
                        self.ns,
                        mf.headless_service(self.inventory, group),
                    )
            for n in self.inventory.nodes:
                self._apply_workload(n, None)
            self._sync()
            from runner.labs import wait_all_ready

            lab = self.inventory.lab
            wait_all_ready(self, TimeScale.of(lab).boot_timeout_lab(lab) + 30)
        except BaseException:
            with contextlib.suppress(LabError):
                self.down()  # nothing half-created
            raise

    def down(self) -> None:
        """Delete what gameday created: its workloads and Services (by its labels), then its
        namespace if it created that; wait until the lab's pods are gone."""
        self._close_watch()
        ns = self._namespace()
        if ns is None:
            return
        self.guard(ns)
        sel = f"{mf.LAB_LABEL}={self.inventory.lab.name}"
        for d in self.call(
            "list deployments", self.apps.list_namespaced_deployment, self.ns, label_selector=sel
        ).items:
            self._delete(self.apps.delete_namespaced_deployment, d.metadata.name)
        for st in self.call(
            "list statefulsets", self.apps.list_namespaced_stateful_set, self.ns, label_selector=sel
        ).items:
            self._delete(self.apps.delete_namespaced_stateful_set, st.metadata.name)
        for s in self.call(
            "list services", self.core.list_namespaced_service, self.ns, label_selector=sel
        ).items:
            self._delete(self.core.delete_namespaced_service, s.metadata.name)
        self._wait_pods_gone(sel, 60)
        if (ns.metadata.annotations or {}).get(mf.CREATED_BY_ANNOTATION) == "gameday":
            self._delete(self.core.delete_namespace, self.ns, namespaced=False)
            self._guarded = False  # a namespace created again is checked again

    def _wait_pods_gone(self, sel: str, timeout: int) -> None:
        """Until no pod matches `sel`: a list, then a watch of its deletions (no polling)."""
        from kubernetes import watch

        pods = self.call("list pods", self.core.list_namespaced_pod, self.ns, label_selector=sel)
        left = {p.metadata.uid for p in pods.items}
        if not left:
            return
        w = watch.Watch()  # type: ignore[no-untyped-call]
        with contextlib.suppress(Exception):  # a dropped watch: the check below says
            for ev in w.stream(  # type: ignore[no-untyped-call]
                self.core.list_namespaced_pod,
                self.ns,
                label_selector=sel,
                resource_version=pods.metadata.resource_version,
                timeout_seconds=timeout,
                _request_timeout=self._watch_timeout(timeout),
            ):
                if ev["type"] == "DELETED":
                    left.discard(ev["object"].metadata.uid)
                if not left:
                    w.stop()  # type: ignore[no-untyped-call]
        pods = self.call("list pods", self.core.list_namespaced_pod, self.ns, label_selector=sel)
        if pods.items:
            raise LabError(
                f"pods of the lab are still there after {timeout} s: "
                + ", ".join(p.metadata.name for p in pods.items[:5]),
                hint=f"kubectl -n {self.ns} get pods -l {sel}",
            )

    def _delete(self, fn: Callable[..., Any], name: str, namespaced: bool = True) -> None:
        args = (name, self.ns) if namespaced else (name,)
        # the answer (the object, or a Status, by kind and server version) is not needed
        opts = {"propagation_policy": "Background", "_preload_content": False}
        status, _ = self._status_of(fn, *args, **opts)
        if status not in (200, 202, 404):
            self.call(f"delete {name}", fn, *args, **opts)

    def leftover_objects(self) -> list[str]:
        """Objects of this lab that exist now (for tests of `lab down`)."""
        ns = self._namespace()
        if ns is None:
            return []
        sel = f"{mf.LAB_LABEL}={self.inventory.lab.name}"
        out = (
            [f"namespace {self.ns}"]
            if mf.CREATED_BY_ANNOTATION in (ns.metadata.annotations or {})
            else []
        )
        for what, fn in (
            ("deployment", self.apps.list_namespaced_deployment),
            ("statefulset", self.apps.list_namespaced_stateful_set),
            ("service", self.core.list_namespaced_service),
            ("pod", self.core.list_namespaced_pod),
        ):
            out += [
                f"{what} {o.metadata.name}"
                for o in self.call(what, fn, self.ns, label_selector=sel).items
            ]
        return out

    # ---- the watch ---------------------------------------------------------------------------

    def _sync(self) -> None:
        """List the lab's pods, then watch from that list's resourceVersion."""
        if self._synced:
            return
        self._require_lab_namespace()
        pods = self.call(
            "list pods",
            self.core.list_namespaced_pod,
            self.ns,
            label_selector=mf.selector(self.inventory),
        )
        for p in sorted(pods.items, key=lambda p: p.metadata.creation_timestamp):
            self._on_pod("ADDED", p, initial=True)
        self._synced = True
        self._stop.clear()
        self._watch_thread = threading.Thread(
            target=self._watch_loop,
            args=(pods.metadata.resource_version,),
            name="kube-watch",
            daemon=True,
        )
        self._watch_thread.start()
        atexit.register(self._close_watch)

    def _close_watch(self) -> None:
        """Stop the watch thread and wait for it: one still reading when the interpreter exits
        can take the process down with it (the client's models are Rust-backed)."""
        self._stop.set()
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
        self._synced = False

    def _watch_loop(self, rv: str) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        while not self._stop.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            self._watch_obj = w
            try:
                for ev in w.stream(  # type: ignore[no-untyped-call]
                    self.core.list_namespaced_pod,
                    self.ns,
                    label_selector=mf.selector(self.inventory),
                    resource_version=rv,
                    timeout_seconds=WATCH_TIMEOUT_S,
                    allow_watch_bookmarks=False,
                    _request_timeout=self._watch_timeout(WATCH_TIMEOUT_S),
                ):
                    if self._stop.is_set():
                        return
                    obj = ev["object"]
                    rv = obj.metadata.resource_version or rv
                    self._on_pod(ev["type"], obj)
            except ApiException as exc:
                if exc.status == 410:  # too old: list again
                    with contextlib.suppress(Exception):
                        rv = self.core.list_namespaced_pod(
                            self.ns,
                            label_selector=mf.selector(self.inventory),
                            _request_timeout=self.spec.request_timeout_s,
                        ).metadata.resource_version
                    continue
                time.sleep(0.2)
            except Exception:
                if self._stop.is_set():
                    return
                time.sleep(0.2)  # the connection dropped: re-open from the last version

    def _node_of(self, pod: Any) -> str | None:
        name = (pod.metadata.labels or {}).get(mf.NODE_LABEL)
        return name if name in self._views else None

    def _on_pod(self, type_: str, pod: Any, initial: bool = False) -> None:
        node = self._node_of(pod)
        if node is None:
            return
        with self.feed.cond:
            v = self._views[node]
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
            if cs.name == mf.CONTAINER:
                return cs
        return None

    def _inc(self, node: str, pod: str, restart_count: int) -> Container | None:
        for inc in self._views[node].incs:
            if inc.pod == pod and inc.restart_count == restart_count:
                return inc
        return None

    def _container_changes(self, node: str, pod: Any, initial: bool) -> None:
        cs = self._container_status(pod)
        if cs is None:
            return
        name = pod.metadata.name
        v = self._views[node]
        last = cs.last_state.terminated if cs.last_state else None
        # the container before this one: it exited (seen now, or missed between two updates)
        if last is not None and cs.restart_count > 0:
            inc, _ = self._inc_of(
                node, name, cs.restart_count - 1, last.container_id, last.started_at
            )
            if inc.finished_at is None:
                self._exited(node, pod, inc, last, initial=initial)
        state = cs.state
        if state.running is not None:
            inc, new = self._inc_of(
                node, name, cs.restart_count, cs.container_id, state.running.started_at
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
            if current and bool(cs.ready) != v.ready:
                v.ready = bool(cs.ready)
                if v.ready and inc.first_output_at is None:
                    # ready means it has logged: its first line is the incarnation's first output
                    logs = self._read_log(name, previous=False)
                    if logs:
                        inc.first_output_at = logs[0].ts
                if not initial:
                    self.feed.emit(
                        node,
                        EventType.READY if v.ready else EventType.UNREADY,
                        datetime.now(UTC),
                        incarnation=inc.number,
                    )
        elif state.terminated is not None:
            term = state.terminated
            inc, _ = self._inc_of(node, name, cs.restart_count, term.container_id, term.started_at)
            if inc.finished_at is None:
                self._exited(node, pod, inc, state.terminated, initial=initial)
            v.ready = False
        elif state.waiting is not None:
            v.ready = False
            if state.waiting.reason == "CrashLoopBackOff" and v.backoff_for != cs.restart_count:
                v.backoff_for = cs.restart_count
                if not initial:
                    m = re.search(r"back-off (\d+(?:\.\d+)?)(m?s)", state.waiting.message or "")
                    delay = (
                        float(m.group(1)) * (0.001 if m and m.group(2) == "ms" else 1) if m else 0
                    )
                    self.feed.emit(
                        node,
                        EventType.BACKOFF,
                        datetime.now(UTC),
                        delay_s=delay / self.inventory.lab.time_scale,
                        restarts=cs.restart_count,
                    )

    def _inc_of(
        self, node: str, pod: str, rc: int, cid: str | None, started: datetime | None
    ) -> tuple[Container, bool]:
        """The incarnation of the pod's container `rc`, and whether it is new (unseen so far)."""
        found = self._inc(node, pod, rc)
        if found is not None:
            return found, False
        incs = self._views[node].incs
        inc = Container(
            number=len(incs) + 1,
            container_id=cid or "",
            started_at=_utc(started) or datetime.now(UTC),
            pod=pod,
            restart_count=rc,
        )
        incs.append(inc)
        return inc, True

    def _read_log(self, pod: str, previous: bool) -> list[LogLine] | None:
        """The container's log with the kubelet's timestamps; None when there is none (400: no
        previous container / still waiting; 404: pod gone)."""
        status, text = self._status_of(
            self.core.read_namespaced_pod_log,
            pod,
            self.ns,
            container=mf.CONTAINER,
            previous=previous,
            timestamps=True,
        )
        if status != 200:
            return None
        return common.stamped_lines(str(text))

    def _which(self, pod: str, container_id: str) -> bool | None:
        """Whether the pod's log endpoint serves that container as `previous` (True), as the
        current one (False: it is the last container, terminated), or not at all (None)."""
        status, obj = self._status_of(self.core.read_namespaced_pod, pod, self.ns)
        cs = self._container_status(obj) if status == 200 else None
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

    def _container_log(self, pod: str, container_id: str) -> list[LogLine] | None:
        """One container's log: the kubelet serves the current and the previous container, and
        the pod may move on between two calls, so which one is asked for is checked again
        after reading."""
        for _ in range(4):
            which = self._which(pod, container_id)
            if which is None:
                return None
            lines = self._read_log(pod, previous=which)
            if self._which(pod, container_id) == which:
                return lines
        return None

    def _exited(self, node: str, pod: Any, inc: Container, term: Any, initial: bool) -> None:
        logs = self._container_log(pod.metadata.name, term.container_id or "") or []
        finished = _utc(term.finished_at) or datetime.now(UTC)
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
        if initial:
            return
        self.feed.emit(node, EventType.EXITED, finished, reason=inc.reason, **inc.exited())

    def _pod_gone(self, node: str, pod: Any) -> None:
        """A deleted pod's containers are gone; one still running when the pod went is a stop."""
        for inc in self._views[node].incs:
            if inc.pod == pod.metadata.name and inc.finished_at is None:
                inc.finished_at = datetime.now(UTC)
                inc.code = 137
                inc.stopped = True
                inc.logs = inc.logs or []

    # ---- observation -------------------------------------------------------------------------

    def states(self) -> dict[str, NodeState]:
        self._sync()
        with self.feed.cond:
            return {n.name: self._state(n) for n in self.inventory.nodes}

    def _state(self, n: Node) -> NodeState:
        v = self._views[n.name]
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
            return common.pending(n.name, v.pods_seen, reason or "")
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
            current=self._inc(n.name, pod.metadata.name, cs.restart_count),
            incarnations=v.incs,
        )

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        self._sync()
        incs = self._views[node].incs
        if not 1 <= incarnation <= len(incs):
            return []
        inc = incs[incarnation - 1]
        if inc.logs is not None:
            return list(inc.logs)
        return self._read_log(inc.pod, previous=False) or []

    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]:
        self._sync()
        out: list[LogLine] = []
        for inc in list(self._views[node].incs):
            lines = inc.logs if inc.logs is not None else (self._read_log(inc.pod, False) or [])
            out += [ln for ln in lines if since is None or ln.ts >= since]
        return sorted(out, key=lambda ln: ln.ts)

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        return self.feed.wait_events(since, timeout)

    def last_event_seq(self) -> int:
        return self.feed.last_event_seq()

    def runtime_events(self, node: str) -> tuple[str, list[RuntimeEvent]]:
        """The Events of the node's current pod, as `kubectl describe pod` lists them (the
        kubelet's probe failures among them: seeds/004's misleading second signal)."""
        pod = self._views[node].pod
        if pod is None:
            return "", []
        name = pod.metadata.name
        evs = self.call(
            "list events",
            self.core.list_namespaced_event,
            self.ns,
            field_selector=f"involvedObject.name={name}",
        ).items
        out = [
            RuntimeEvent(
                ts=_utc(e.last_timestamp or e.first_timestamp) or datetime.now(UTC),
                warning=e.type == "Warning",
                text=f"{e.type or '':<8} {e.reason or '':<16} (x{e.count or 1}) {e.message or ''}",
            )
            for e in evs
        ]
        return f"Kubernetes Events of pod {name}", sorted(out, key=lambda e: e.ts)

    def url(self, node: str) -> str:
        n = self.inventory.node(node)
        if n.published:
            return n.url
        pod = self._views[node].pod
        ip = pod.status.pod_ip if pod is not None and pod.status else None
        if not ip:
            raise LabError(
                f"{node}: its pod has no IP yet",
                hint="set gameday_published to an address that reaches the Service "
                "(kubectl port-forward svc/vllm 8000), or run gameday where pod IPs route",
            )
        return f"http://{ip}:{n.port}"

    # ---- changes -----------------------------------------------------------------------------

    def baseline_config(self, node: str) -> NodeConfig:
        return mf.baseline_config(self.inventory, self.inventory.node(node))

    def config(self, node: str) -> NodeConfig:
        self._require_lab_namespace()
        calls = self._calls(self.inventory.node(node))
        d = self.call(f"read {calls.kind} {node}", calls.read, node, self.ns)
        return mf.config_of(d, self.inventory)

    def current(self, change: Change) -> NodeConfig | ProcessState | Value:
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        raise LabError(
            f"the kubernetes lab has no {change.kind.value} changes in this version "
            "(a process, an address or a scrape config on a node is outside the API)",
            hint="this scenario runs on the local and compose labs",
        )

    def check_service(self, service: str, port: int) -> None:
        """The scenario's mechanism is the variables the kubelet injects for a Service: it must
        exist in the namespace, with that port (the seed's baseline Service `vllm`)."""
        self._require_lab_namespace()
        status, svc = self._status_of(self.core.read_namespaced_service, service, self.ns)
        if status != 200:
            raise LabError(
                f"no Service named {service!r} in namespace {self.ns}: the scenario's mechanism "
                "is the variables the kubelet injects for it",
                hint=f"the lab's Service is {self.spec.service!r} (gameday_lab.kubernetes.service)",
            )
        ports = [p.port for p in svc.spec.ports or []]
        if port not in ports:
            raise LabError(f"Service {service!r} has ports {ports}, not {port}")

    def apply(self, change: Change) -> None:
        if change.kind is ChangeKind.NODE_CONFIG and isinstance(change.after, NodeConfig):
            self._sync()
            self._expect_stop_now([change.node])
            pod = self._views[change.node].pod
            self._apply_workload(self.inventory.node(change.node), change.after)
            if pod is not None and change.after != change.before:
                self._wait_replacing({change.node: pod.metadata.uid})
            return
        self.current(change)  # raises: not a change this lab makes

    def _apply_workload(self, node: Node, cfg: NodeConfig | None) -> None:
        body = mf.workload(self.inventory, node, cfg)
        calls = self._calls(node)
        status, _ = self._status_of(calls.read, node.name, self.ns)
        if status == 404:
            self.call(f"create {calls.kind} {node.name}", calls.create, self.ns, body)
        else:
            self.call(f"replace {calls.kind} {node.name}", calls.replace, node.name, self.ns, body)

    def _wait_replacing(self, old: dict[str, str], timeout: float = 60) -> None:
        """Until the watch shows each node's old pod terminating or gone: from then on, the
        node's state is the new pod's, not the old one's last word."""

        def replacing() -> bool:
            for node, uid in old.items():
                pod = self._views[node].pod
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

    def _expect_stop_now(self, nodes: Sequence[str]) -> None:
        with self.feed.cond:
            for n in nodes:
                incs = self._views[n].incs
                self._expect_stop[n] = incs[-1].number if incs else 0

    def restart(self, nodes: Sequence[str]) -> None:
        """Delete the nodes' pods at once (`kubectl delete pod`): their controllers create new
        ones, which is how a pod is restarted on Kubernetes."""
        self._sync()
        self._expect_stop_now(nodes)
        old = {}
        for n in nodes:
            pod = self._views[n].pod
            if pod is None:
                raise LabNotUp(f"{n} has no pod to restart")
            old[n] = pod.metadata.uid
            self._delete(self.core.delete_namespaced_pod, pod.metadata.name)
        self._wait_replacing(old)

    def leftovers(self) -> list[str]:
        return common.leftovers(self, [], config="deployment")


def _api_message(exc: Any) -> str:
    import json

    with contextlib.suppress(ValueError, TypeError):
        return str(json.loads(exc.body).get("message", ""))[:300]
    return str(exc.body or "")[:300]
