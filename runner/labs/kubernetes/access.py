"""What the Kubernetes lab does inside and beside its pods: exec into an engine's container
(signals, the GPU list), stray pods on a node (programs: the stray GPU process write-up on a
cluster), and its Prometheus's pod. KubernetesLab (runner.labs.kubernetes.driver) holds one and
answers the seam's exec, signal, GPU-list and Prometheus calls through it; what it needs of the
driver (its sync, its namespace guard, its wait for pods to go) is handed to it as callables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runner.errors import LabError, LabNotUp
from runner.labs.base import GpuProcess, PartDeath, ProcessState, last_lines
from runner.labs.common import helpers as common
from runner.labs.common.events import EventFeed
from runner.labs.kubernetes import alertmanager as kam
from runner.labs.kubernetes import monitoring as kmon
from runner.labs.kubernetes import stray
from runner.labs.kubernetes.api import KubeApi
from runner.labs.kubernetes.podexec import (
    NVIDIA_SMI_QUERY,
    SIGNAL_CHILDREN,
    SIGNAL_PID1,
    ExecResult,
    exec_in,
    nvidia_smi_processes,
)
from runner.labs.kubernetes.watch import PodWatch
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import Inventory

# A container waiting for one of these will not run without a change: it has died as surely
# as one that exited (ContainerCreating and PodInitializing are on their way up).
DEAD_WAITING = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
LOG_TAIL = 50  # lines of a dead monitoring container's log asked of the kubelet


class PodAccess:
    """Exec, stray pods and the Prometheus pod of one Kubernetes lab."""

    def __init__(
        self,
        inventory: Inventory,
        kube: KubeApi,
        pods: PodWatch,
        feed: EventFeed,
        sync: Callable[[], None],
        require_lab_namespace: Callable[[], None],
        wait_pods_gone: Callable[[str, int], None],
    ) -> None:
        self.inventory = inventory
        self.kube = kube
        self.pods = pods
        self.feed = feed
        self.ns = kube.ns
        self._sync = sync
        self._require_lab_namespace = require_lab_namespace
        self._wait_pods_gone = wait_pods_gone
        self._prometheus: str | None = None  # the Prometheus pod's URL, once found

    def forget_prometheus(self) -> None:
        """The Prometheus pod may be another one after `lab up` or `lab down`."""
        self._prometheus = None

    # ---- exec: signals and the GPU list ------------------------------------------------------

    def _pod_of(self, node: str) -> str:
        self._sync()
        pod = self.pods.views[node].pod
        if pod is None:
            raise LabNotUp(f"{node} has no pod", hint=f"kubectl -n {self.ns} get pods")
        return str(pod.metadata.name)

    def exec(self, node: str, argv: Sequence[str]) -> ExecResult:
        """Run `argv` in the node's engine container (`kubectl exec`)."""
        return exec_in(self.kube, self._pod_of(node), argv, container=self.pods.container)

    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        """The signal to the engine's engine core (the children of the container's PID 1) or to
        its main process (PID 1), through exec."""
        if process is EngineProcess.ENGINE_CORE:
            r = self.exec(node, ["python3", "-c", SIGNAL_CHILDREN, signal.value])
            if r.rc != 0:
                raise LabError(
                    f"{node}: no engine-core process to signal (exit {r.rc}) "
                    f"{(r.stdout + r.stderr).strip()[:200]}"
                )
            return
        r = self.exec(node, ["python3", "-c", SIGNAL_PID1, signal.value])
        if r.rc != 0:
            raise LabError(f"{node}: the signal to PID 1 failed: {(r.stdout + r.stderr)[:200]}")

    def gpu_processes(self, node: str) -> list[GpuProcess]:
        """The node's GPU process list from inside its pod: `vllm-lab smi --json` in the lab
        engine's image, `nvidia-smi`'s compute-apps query in vLLM's."""
        if self.inventory.lab.engine_command[:1] == ("vllm-lab",):
            r = self.exec(node, ["vllm-lab", "smi", "--json"])
            if r.rc != 0:
                raise LabError(f"{node}: `vllm-lab smi` failed: {(r.stdout + r.stderr)[:200]}")
            return common.gpu_processes_of(r.stdout)
        r = self.exec(node, [*NVIDIA_SMI_QUERY])
        if r.rc != 0:
            raise LabError(f"{node}: nvidia-smi failed: {(r.stdout + r.stderr)[:200]}")
        return nvidia_smi_processes(r.stdout)

    # ---- stray pods: programs on a node -------------------------------------------------------

    def strays(self) -> list[Any]:
        return list(
            self.kube.call(
                "list stray pods",
                self.kube.core.list_namespaced_pod,
                self.ns,
                label_selector=stray.selector(self.inventory),
            ).items
        )

    def stray_state(self, name: str) -> ProcessState:
        self._require_lab_namespace()
        status, pod = self.kube.status_of(
            self.kube.core.read_namespaced_pod, stray.pod_name(name), self.ns
        )
        if status != 200 or pod.metadata.deletion_timestamp is not None:
            return ProcessState(running=False)
        phase = pod.status.phase if pod.status else None
        command = tuple(pod.spec.containers[0].command or ())
        return ProcessState(running=phase in (None, "Pending", "Running"), command=command)

    def apply_stray(self, node: str, name: str, want: ProcessState) -> None:
        pod_name = stray.pod_name(name)
        if not want.running:
            self.kube.delete(self.kube.core.delete_namespaced_pod, pod_name)
            self._wait_pod_gone(pod_name, 60)
            return
        self._sync()
        target = self.pods.views[node].pod
        host = target.spec.node_name if target is not None and target.spec else None
        if not host:
            raise LabNotUp(f"{node}'s pod is not on a node yet: nowhere to put {name}")
        status, _ = self.kube.status_of(self.kube.core.read_namespaced_pod, pod_name, self.ns)
        if status == 200:  # a finished one of an earlier start: a bare pod is not restarted
            self.kube.delete(self.kube.core.delete_namespaced_pod, pod_name)
            self._wait_pod_gone(pod_name, 60)
        body = stray.stray_pod(
            self.inventory, name, host, stray.command_for(self.inventory, want.command)
        )
        self.kube.call(
            f"create pod {pod_name}", self.kube.core.create_namespaced_pod, self.ns, body
        )

    def _wait_pod_gone(self, name: str, timeout: float) -> None:
        """Until the pod is gone: its deletion seen on a watch (no polling)."""
        self._wait_pods_gone(f"{stray.STRAY_LABEL}={name}", int(timeout))

    # ---- its Prometheus ----------------------------------------------------------------------

    def prometheus_url(self) -> str | None:
        """`monitoring.prometheus_url` (a port-forward), else the Prometheus pod's IP, as the
        engines are reached; LabError while it has none."""
        mon = self.inventory.lab.monitoring
        if mon is None:
            return self.inventory.lab.prometheus
        url = mon.prometheus_url or self._prometheus_pod()
        if url is None:
            raise LabError(
                f"the lab's Prometheus pod has no IP yet (namespace {self.ns})",
                hint=f"kubectl -n {self.ns} get pods -l {kmon.selector(self.inventory)}",
            )
        return url

    def _prometheus_pod(self) -> str | None:
        if self._prometheus is None:  # read once: the Deployment's pod keeps its IP
            self._require_lab_namespace()
            self._prometheus = kmon.pod_url(self.kube, self.inventory)
        return self._prometheus

    def monitoring_ready(self, timeout_s: float) -> None:
        """Until Prometheus has scraped each serving and head pod once, at its pod IP."""
        mon = self.inventory.lab.monitoring
        if mon is None:
            return
        self._sync()

        def pod_ips() -> dict[str, str | None]:
            with self.feed.cond:
                pods = {n.name: self.pods.views[n.name].pod for n in self.inventory.nodes}
            return {
                k: p.status.pod_ip if p is not None and p.status else None for k, p in pods.items()
            }

        kmon.wait_scraped(
            lambda: mon.prometheus_url or self._prometheus_pod(),
            lambda: kmon.engine_targets(self.inventory, pod_ips()),
            timeout_s,
            hint=f"kubectl -n {self.ns} logs deploy/{kmon.NAME}; its targets page says why",
            dead=self.dead_part,
        )

    def dead_part(self) -> PartDeath | None:
        """The first container of the monitoring's pods (Prometheus's, Alertmanager's) that has
        restarted, ended, or waits for what will not come by itself (DEAD_WAITING), with its
        waiting reason, restart count, last exit status and the last lines of its log (the
        kubelet's: the dead container's while it waits to restart)."""
        if self.inventory.lab.monitoring is None:
            return None
        for what, sel in (
            ("Prometheus", kmon.selector(self.inventory)),
            ("Alertmanager", kam.selector(self.inventory)),
        ):
            pods = self.kube.call(
                f"list {what}'s pods",
                self.kube.core.list_namespaced_pod,
                self.ns,
                label_selector=sel,
            ).items
            for p in pods:
                if p.metadata.deletion_timestamp is not None or p.status is None:
                    continue
                for cs in p.status.container_statuses or []:
                    if (death := self._death(what, p.metadata.name, cs)) is not None:
                        return death
        return None

    def _death(self, what: str, pod: str, cs: Any) -> PartDeath | None:
        state, last = cs.state, cs.last_state
        waiting = state.waiting if state else None
        ended = state.terminated if state else None
        before = last.terminated if last else None
        dead_wait = waiting is not None and waiting.reason in DEAD_WAITING
        if not (cs.restart_count or ended is not None or dead_wait):
            return None
        exited = ended if ended is not None else before
        exit_code = exited.exit_code if exited is not None else None
        # a container running again says nothing of why it stopped: its last exit does (Error)
        reason = (
            (waiting.reason if waiting else "")
            or (ended.reason if ended else "")
            or (before.reason if before else "")
            or ""
        )
        # a container running again after a restart: the one that died is the previous
        previous = state is not None and state.running is not None
        try:
            text = self.kube.call(
                f"read the log of pod {pod}",
                self.kube.core.read_namespaced_pod_log,
                pod,
                self.ns,
                container=cs.name,
                previous=previous,
                tail_lines=LOG_TAIL,
            )
            lines = last_lines(str(text))
        except LabError as exc:
            lines = (f"(its log cannot be read: {exc.message})",)
        return PartDeath(
            part=f"{what} (pod {pod})",
            exit_code=exit_code,
            reason=reason,
            restarts=int(cs.restart_count or 0),
            last_lines=lines,
            log=f"kubectl -n {self.ns} logs {pod}" + (" --previous" if previous else ""),
        )
