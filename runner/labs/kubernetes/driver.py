"""The Kubernetes lab's driver, on the official `kubernetes` client. Implements
runner.labs.base.LabDriver.

Plain API use, so that what the tests exercise (against tests/kubeapi, a stand-in API server)
is what a real cluster receives: create / replace / delete of the lab's Namespace, Services,
Deployments (single-node servers) and StatefulSets (the ranks of a tensor-parallel group, and
servers that address each other by name); one
list of the lab's pods, then a watch from its resourceVersion (an informer's cache: `states()`
reads it, no polling); pod logs with `timestamps=true`, current and
`previous`; Events of a pod.

Incarnations are containers: each (pod, restartCount) the watch shows running is one
(runner.labs.kubernetes.watch says how their times and logs are read). The driver holds the API
client (runner.labs.kubernetes.api.KubeApi) and the pod watch (watch.PodWatch).

Blast radius: the driver acts only in a namespace labelled `gameday.io/lab=<lab name>` (it
labels the ones it creates), unless GAMEDAY_ALLOW_NAMESPACE names that namespace; it deletes
only objects carrying its labels, and the namespace only if it created it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner.errors import InventoryError, LabError, LabNotUp
from runner.labs.base import (
    Capability,
    Change,
    ChangeKind,
    GpuProcess,
    LabDriver,
    LabEvent,
    LogLine,
    NodeConfig,
    NodeState,
    PartDeath,
    ProcessState,
    RuntimeEvent,
    Value,
)
from runner.labs.common import helpers as common
from runner.labs.common.alertmanager_config import receiver_token
from runner.labs.common.events import EventFeed
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes import monitoring as kmon
from runner.labs.kubernetes.access import PodAccess
from runner.labs.kubernetes.api import CONFLICT_RETRIES, Conflict, KubeApi, conflict_pause
from runner.labs.kubernetes.podexec import ExecResult
from runner.labs.kubernetes.watch import PodWatch, as_utc
from runner.labs.lifecycle import crash_loop_backoff_s
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import GroupWorkload, Inventory, Node
from runner.spec.kinds import LabKind
from runner.spec.timing import TimeScale

ALLOW_ENV = "GAMEDAY_ALLOW_NAMESPACE"
WATCH_TIMEOUT_S = 240  # a watch is re-opened from the last resourceVersion after this
# wall seconds a container's run may take, past the back-off, before its log stands in for a
# lost one's (a vLLM start that fails at once)
LOST_LOG_WAIT_S = 60.0
NAMESPACE_GONE_S = 180  # the namespace controller empties a deleted namespace; EKS takes minutes


class KubernetesLab(LabDriver):
    kind = LabKind.KUBERNETES
    label = "kubernetes lab"
    reports_first_output = False  # a pod's log is read at ready or exit, not followed

    @property
    def capabilities(self) -> frozenset[Capability]:  # type: ignore[override]
        """Exec into pods (signals, the GPU list), stray pods (programs on a node), Services;
        its Prometheus when the inventory has monitoring; alerts delivered to the runner only
        where `monitoring.receiver_listen` names an address the cluster's pods reach (the
        default, an address on the runner's machine, is reached by no pod of a real cluster)."""
        caps = {
            Capability.SERVICE_LINKS,
            Capability.SIGNALS,
            Capability.GPU_PROCESSES,
            Capability.PROCESSES,
        }
        mon = self.inventory.lab.monitoring
        if mon is not None:
            caps.add(Capability.MONITORING)
            if mon.receiver_listen:
                caps.add(Capability.ALERT_DELIVERY)
        return frozenset(caps)

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.spec = mf.spec_of(inventory)
        self.ns = self.spec.namespace
        lab = inventory.lab
        self._state_dir = common.state_dir(lab)
        self.artifacts_dir: Path | None = None
        self.kube = KubeApi(inventory, self.spec)
        self.feed = EventFeed(sync=self._sync)
        self.pods = PodWatch(inventory, self.kube, self.feed)
        # (node, incarnation) -> the incarnation whose log logs_of gave for it (stood_in_by)
        self._stood_in: dict[tuple[str, int], int] = {}
        self._guarded = False
        self.access = PodAccess(
            inventory,
            self.kube,
            self.pods,
            self.feed,
            sync=self._sync,
            require_lab_namespace=self._require_lab_namespace,
            wait_pods_gone=self._wait_pods_gone,
        )

    @property
    def state_dir(self) -> Path:
        return self._state_dir

    # ---- inside and beside the pods (runner.labs.kubernetes.access) --------------------------

    def exec(self, node: str, argv: Sequence[str]) -> ExecResult:
        """Run `argv` in the node's engine container (`kubectl exec`)."""
        return self.access.exec(node, argv)

    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        self.access.signal(node, process, signal)

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        return self.access.gpu_processes(node)

    def prometheus_url(self) -> str | None:
        return self.access.prometheus_url()

    def monitoring_ready(self, timeout_s: float) -> None:
        self.access.monitoring_ready(timeout_s)

    def dead_part(self) -> PartDeath | None:
        return self.access.dead_part()

    # ---- the blast-radius guard ---------------------------------------------------------------

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
        ns = self.kube.namespace()
        if ns is None:
            raise LabNotUp(
                f"kubernetes lab {self.inventory.lab.name!r}: namespace {self.ns} does not exist",
                hint=f"gameday lab up --lab {self.inventory.path}",
            )
        self.guard(ns)

    # ---- lifecycle ---------------------------------------------------------------------------

    def is_up(self) -> bool:
        ns = self.kube.namespace()
        if ns is None:
            return False
        self.guard(ns)
        return self._workloads_exist()

    def _workloads_exist(self) -> bool:
        return all(
            self.kube.status_of(self.kube.calls(n).read, n.name, self.ns)[0] == 200
            for n in self.inventory.nodes
        )

    def _receiver_token(self) -> str | None:
        """The lab's receiver token (made now if the lab has none), for Alertmanager's Secret."""
        return receiver_token(self.state_dir, create=True)

    def up(self) -> None:
        if self.spec.group_workload is GroupWorkload.LEADERWORKERSET:
            from runner.labs.kubernetes import lws

            lws.require_api(self.kube)  # before anything is created
        self.access.forget_prometheus()
        ns = self.kube.namespace()
        if ns is not None and ns.metadata.deletion_timestamp:
            self.kube.wait_namespace_gone(NAMESPACE_GONE_S)  # a lab taken down a moment ago
            ns = None
        if ns is not None:
            self.guard(ns)
            if self._workloads_exist():
                kmon.apply(self.kube, self.inventory, self._receiver_token())
                self._sync()
                return
        created_ns = ns is None
        try:
            if created_ns:
                self.kube.call(
                    "create namespace",
                    self.kube.core.create_namespace,
                    mf.namespace(self.inventory),
                )
                self._guarded = True
            svc = mf.service(self.inventory)
            status, _ = self.kube.status_of(
                self.kube.core.read_namespaced_service, self.spec.service, self.ns
            )
            if status == 404:
                self.kube.call(
                    "create service", self.kube.core.create_namespaced_service, self.ns, svc
                )
            for group in mf.headless_groups(self.inventory):
                status, _ = self.kube.status_of(
                    self.kube.core.read_namespaced_service, group, self.ns
                )
                if status == 404:
                    self.kube.call(
                        f"create headless service {group}",
                        self.kube.core.create_namespaced_service,
                        self.ns,
                        mf.headless_service(self.inventory, group),
                    )
            # Prometheus starts while the engines boot
            kmon.apply(self.kube, self.inventory, self._receiver_token())
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
        self.pods.close()
        self.access.forget_prometheus()
        ns = self.kube.namespace()
        if ns is None:
            return
        self.guard(ns)
        sel = f"{mf.LAB_LABEL}={self.inventory.lab.name}"
        if self.inventory.lab.monitoring is not None:
            kmon.delete(self.kube, self.inventory)  # its Deployment goes with the engines'
        for d in self.kube.call(
            "list deployments",
            self.kube.apps.list_namespaced_deployment,
            self.ns,
            label_selector=sel,
        ).items:
            self.kube.delete(self.kube.apps.delete_namespaced_deployment, d.metadata.name)
        for st in self.kube.call(
            "list statefulsets",
            self.kube.apps.list_namespaced_stateful_set,
            self.ns,
            label_selector=sel,
        ).items:
            self.kube.delete(self.kube.apps.delete_namespaced_stateful_set, st.metadata.name)
        for s in self.kube.call(
            "list services", self.kube.core.list_namespaced_service, self.ns, label_selector=sel
        ).items:
            self.kube.delete(self.kube.core.delete_namespaced_service, s.metadata.name)
        for p in self.access.strays():
            self.kube.delete(self.kube.core.delete_namespaced_pod, p.metadata.name)
        self._wait_pods_gone(sel, 60)
        if (ns.metadata.annotations or {}).get(mf.CREATED_BY_ANNOTATION) == "gameday":
            self.kube.delete(self.kube.core.delete_namespace, self.ns, namespaced=False)
            self._guarded = False  # a namespace created again is checked again
            self.kube.wait_namespace_gone(NAMESPACE_GONE_S)

    def _wait_pods_gone(self, sel: str, timeout: int) -> None:
        """Until no pod matches `sel`: a list, then a watch of its deletions (no polling)."""
        from kubernetes import watch

        pods = self.kube.call(
            "list pods", self.kube.core.list_namespaced_pod, self.ns, label_selector=sel
        )
        left = {p.metadata.uid for p in pods.items}
        if not left:
            return
        w = watch.Watch()  # type: ignore[no-untyped-call]
        with contextlib.suppress(Exception):  # a dropped watch: the check below says
            for ev in w.stream(  # type: ignore[no-untyped-call]
                self.kube.core.list_namespaced_pod,
                self.ns,
                label_selector=sel,
                resource_version=pods.metadata.resource_version,
                timeout_seconds=timeout,
                _request_timeout=self.kube.watch_timeout(timeout),
            ):
                if ev["type"] == "DELETED":
                    left.discard(ev["object"].metadata.uid)
                if not left:
                    w.stop()  # type: ignore[no-untyped-call]
        pods = self.kube.call(
            "list pods", self.kube.core.list_namespaced_pod, self.ns, label_selector=sel
        )
        if pods.items:
            raise LabError(
                f"pods of the lab are still there after {timeout} s: "
                + ", ".join(p.metadata.name for p in pods.items[:5]),
                hint=f"kubectl -n {self.ns} get pods -l {sel}",
            )

    def leftover_objects(self) -> list[str]:
        """Objects of this lab that exist now (for tests of `lab down`)."""
        ns = self.kube.namespace()
        if ns is None:
            return []
        sel = f"{mf.LAB_LABEL}={self.inventory.lab.name}"
        out = (
            [f"namespace {self.ns}"]
            if mf.CREATED_BY_ANNOTATION in (ns.metadata.annotations or {})
            else []
        )
        for what, fn in (
            ("deployment", self.kube.apps.list_namespaced_deployment),
            ("statefulset", self.kube.apps.list_namespaced_stateful_set),
            ("service", self.kube.core.list_namespaced_service),
            ("pod", self.kube.core.list_namespaced_pod),
        ):
            out += [
                f"{what} {o.metadata.name}"
                for o in self.kube.call(what, fn, self.ns, label_selector=sel).items
            ]
        if self.inventory.lab.monitoring is not None:
            out += kmon.leftovers(self.kube, self.inventory)
        return out

    # ---- the watch ---------------------------------------------------------------------------

    def _sync(self) -> None:
        """List the lab's pods, then watch from that list's resourceVersion."""
        if self.pods.synced:
            return
        self._require_lab_namespace()
        self.pods.sync(WATCH_TIMEOUT_S)

    # ---- observation -------------------------------------------------------------------------

    def states(self) -> dict[str, NodeState]:
        self._sync()
        with self.feed.cond:
            return {n.name: self.pods.state_of(n) for n in self.inventory.nodes}

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        self._sync()
        incs = self.pods.views[node].incs
        if not 1 <= incarnation <= len(incs):
            return []
        inc = incs[incarnation - 1]
        if inc.logs_lost:
            # the pod's next failure stands in for it: in a crash loop it comes after the
            # kubelet's back-off for this restart (scaled) and the container's own run
            backoff = crash_loop_backoff_s(inc.restart_count) / self.inventory.lab.time_scale
            wait_s = min(backoff + LOST_LOG_WAIT_S, 360.0)
            with self.feed.cond:
                self.feed.cond.wait_for(lambda: self.pods.stand_in(node, inc)[0], wait_s)
            later = self.pods.stand_in(node, inc)[1]
            if later is not None:
                self._stood_in[(node, incarnation)] = later.number
                return list(later.logs or [])
        if inc.logs is not None:
            return list(inc.logs)
        return self.pods.read_log(inc.pod, previous=False) or []

    def stood_in_by(self, node: str, incarnation: int) -> int | None:
        return self._stood_in.get((node, incarnation))

    def logs_since(self, node: str, since: datetime | None) -> list[LogLine]:
        self._sync()
        out: list[LogLine] = []
        for inc in list(self.pods.views[node].incs):
            lines = inc.logs if inc.logs is not None else (self.pods.read_log(inc.pod, False) or [])
            out += [ln for ln in lines if since is None or ln.ts >= since]
        return sorted(out, key=lambda ln: ln.ts)

    def wait_events(self, since: int, timeout: float) -> list[LabEvent]:
        return self.feed.wait_events(since, timeout)

    def last_event_seq(self) -> int:
        return self.feed.last_event_seq()

    def runtime_events(self, node: str) -> tuple[str, list[RuntimeEvent]]:
        """The Events of the node's current pod, as `kubectl describe pod` lists them (the
        kubelet's probe failures among them: the EKS start-failure write-up's misleading second
        signal)."""
        pod = self.pods.views[node].pod
        if pod is None:
            return "", []
        name = pod.metadata.name
        evs = self.kube.call(
            "list events",
            self.kube.core.list_namespaced_event,
            self.ns,
            field_selector=f"involvedObject.name={name}",
        ).items
        out = [
            RuntimeEvent(
                ts=as_utc(e.last_timestamp or e.first_timestamp) or datetime.now(UTC),
                warning=e.type == "Warning",
                text=f"{e.type or '':<8} {e.reason or '':<16} (x{e.count or 1}) {e.message or ''}",
            )
            for e in evs
        ]
        return f"Kubernetes Events of pod {name}", sorted(out, key=lambda e: e.ts)

    def facts(self) -> dict[str, str]:
        facts = {
            **super().facts(),
            "GAMEDAY_KUBE_CONTEXT": self.spec.context or "",
            "GAMEDAY_KUBE_NAMESPACE": self.ns,
        }
        if self.spec.kubeconfig:
            cfg = (self.inventory.path.parent / self.spec.kubeconfig).resolve()
            facts["GAMEDAY_KUBECONFIG"] = str(cfg)
        else:  # where the lab's client reads it from, as kubectl does
            facts["GAMEDAY_KUBECONFIG"] = os.environ.get(
                "KUBECONFIG", str(Path.home() / ".kube" / "config")
            )
        return facts

    def url(self, node: str) -> str:
        n = self.inventory.node(node)
        if n.published:
            return n.url
        pod = self.pods.views[node].pod
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
        calls = self.kube.calls(self.inventory.node(node))
        d = self.kube.call(f"read {calls.kind} {node}", calls.read, node, self.ns)
        return mf.config_of(d, self.inventory)

    def current(self, change: Change) -> NodeConfig | ProcessState | Value:
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        if change.kind is ChangeKind.PROCESS:
            return self.access.stray_state(change.subject)
        raise LabError(
            f"the kubernetes lab has no {change.kind.value} changes "
            "(a node's address or a scrape config is outside the API: Prometheus finds pods "
            "through it)",
            hint="this scenario runs on the local and compose labs",
        )

    def check_service(self, service: str, port: int) -> None:
        """The scenario's mechanism is the variables the kubelet injects for a Service: it must
        exist in the namespace, with that port (the EKS start-failure write-up's baseline Service
        `vllm`)."""
        self._require_lab_namespace()
        status, svc = self.kube.status_of(self.kube.core.read_namespaced_service, service, self.ns)
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
        if change.kind is ChangeKind.PROCESS and isinstance(change.after, ProcessState):
            self.access.apply_stray(change.node, change.subject, change.after)
            return
        if change.kind is ChangeKind.NODE_CONFIG and isinstance(change.after, NodeConfig):
            self._sync()
            self.pods.expect_stop_now([change.node])
            pod = self.pods.views[change.node].pod
            self._apply_workload(self.inventory.node(change.node), change.after)
            if pod is not None and change.after != change.before:
                # the old pod gone, as the compose lab stops the old container before it
                # returns: one still shutting down answers some requests and fails others, and
                # a probe right after the change would judge it rather than the new one
                old = {change.node: pod.metadata.uid}
                self.pods.wait_gone(old, self.spec.termination_grace_s + 60)
                # and its successor created, so a restart right after has a pod to delete
                self.pods.wait_successor(old, 60)
            return
        self.current(change)  # raises: not a change this lab makes

    def _apply_workload(self, node: Node, cfg: NodeConfig | None) -> None:
        body = mf.workload(self.inventory, node, cfg)
        calls = self.kube.calls(node)
        status, _ = self.kube.status_of(calls.read, node.name, self.ns)
        if status == 404:
            self.kube.call(f"create {calls.kind} {node.name}", calls.create, self.ns, body)
        else:
            self.kube.call(
                f"replace {calls.kind} {node.name}", calls.replace, node.name, self.ns, body
            )

    def restart(self, nodes: Sequence[str]) -> None:
        """Delete the nodes' pods at once (`kubectl delete pod`): their controllers create new
        ones, which is how a pod is restarted on Kubernetes."""
        self._sync()
        self.pods.expect_stop_now(nodes)
        old = {}
        for n in nodes:
            pod = self.pods.views[n].pod
            if pod is None:
                raise LabNotUp(f"{n} has no pod to restart")
            old[n] = pod.metadata.uid
            self.kube.delete(self.kube.core.delete_namespaced_pod, pod.metadata.name)
        self.pods.wait_replacing(old)

    def stop(self, node: str) -> None:
        """`kubectl scale --replicas=0` of the node's workload. Deleting the pod is no stop on
        Kubernetes (its controller creates a new one at once), and a pod has no stopped state:
        the real-cluster equivalent of a stopped container is a workload with no replica."""
        self._sync()
        self.pods.expect_stop_now([node])
        self._scale(node, 0)

    def start(self, node: str) -> None:
        """`kubectl scale --replicas=1` of a workload `stop` scaled to none."""
        self._scale(node, 1)

    def _scale(self, node: str, replicas: int) -> None:
        self._require_lab_namespace()
        calls = self.kube.calls(self.inventory.node(node))
        for attempt in range(CONFLICT_RETRIES):
            obj = self.kube.call(f"read {calls.kind} {node}", calls.read, node, self.ns)
            if obj.spec.replicas == replicas:
                return
            obj.spec.replicas = replicas
            try:
                self.kube.call(f"scale {calls.kind} {node}", calls.replace, node, self.ns, obj)
                return
            except Conflict:
                # the controller's status update since the read (it writes one as pods come and
                # go); the replica count is all this write changes, so it is read and set again
                # (`kubectl scale` writes the scale subresource, with no precondition at all)
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                conflict_pause()

    def leftovers(self) -> list[str]:
        strays = [f"stray pod {p.metadata.name} is running" for p in self.access.strays()]
        return common.leftovers(self, strays, config="deployment")
