"""A node's container runtime, shared by the stand-in API server (server.py) and the kubelet
that is a client of a real API server (tests/kubereal/kubelet.py).

`NodeRuntime` is what a kubelet does for one pod once the pod is bound to its node: it mounts the
pod's volumes, runs its container as a lab-engine process in its own PID, UTS and mount namespace
(init.py), with the environment the real kubelet gives it (the Service-link variables with
`enableServiceLinks`, pkg/kubelet/envvars; `$(VAR)` expansion), on the pod's own loopback IP;
probes it (startup and readiness, `Unhealthy` Events); restarts it with CrashLoopBackOff's
schedule; keeps each container's log for `logs` (current and `previous`); and finds the container
`exec` enters. Where the pod's object is read and written (a store in the same process, or a real
API server) is left to the subclass: `pod`, `update_status`, `event`, `services`, `lookup`,
`host_ip` and `finish`.

Every period (probe, back-off, grace) is divided by the time scale, like the lab engine's phases.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from runner.labs.common.servicelinks import kubernetes_service_env
from runner.labs.lifecycle import crash_loop_backoff_s
from runner.programs import command_argv
from tests.kubeapi import volumes as kvolumes

GPU_RESOURCE = "nvidia.com/gpu"

POD_NAMESPACES = ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--kill-child"]
INIT = Path(__file__).with_name("init.py")


def now() -> datetime:
    return datetime.now(UTC)


def k8s_time(t: datetime) -> str:
    """metav1.Time: RFC 3339, whole seconds."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def k8s_nano(t: datetime) -> str:
    """RFC 3339 with nanoseconds, as the kubelet stamps log lines."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind} "{name}" not found')


# ---- the kubelet's containers ----------------------------------------------------------------


@dataclass
class Container:
    id: str
    proc: subprocess.Popen[bytes]
    started_at: datetime
    log: list[tuple[datetime, str]] = field(default_factory=list)
    finished_at: datetime | None = None
    exit_code: int | None = None
    killed_by_probe: bool = False
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""

    def init_pid(self) -> int | None:
        """The host PID of the container's PID 1 (the child `unshare --fork` started), or None
        when it has not started or has exited."""
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return None
        return int(kids.split()[0]) if kids.split() else None

    def entered(self, pid: int) -> bool:
        """Whether `pid` (from init_pid) is the container's command already: until init.py
        execs it, the new namespaces are half made (no hostname yet; before `--mount-proc`, the
        host's /proc), as they never are when a container runtime reports a container running."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return bytes(INIT) not in cmdline and cmdline[0] != b"unshare"


@dataclass
class PodRuntime:
    ns: str
    name: str
    uid: str
    ip: str
    containers: list[Container] = field(default_factory=list)
    node: str = ""
    deleting: threading.Event = field(default_factory=threading.Event)
    gone: threading.Event = field(default_factory=threading.Event)
    volumes: dict[str, Path] = field(default_factory=dict)  # volume name -> its directory


class NodeRuntime(ABC):
    """The kubelet's work for the pods bound to its nodes (see the module's docstring)."""

    def __init__(self, time_scale: float, state_dir: Path, gpus: int) -> None:
        self.scale = time_scale
        self.state_dir = state_dir
        self.gpus = gpus  # per node
        self.runtimes: dict[str, PodRuntime] = {}  # pod uid -> its runtime
        self.stopping = threading.Event()
        self.started: list[Container] = []  # every container ever started, for stop_containers()
        self.ips = itertools.cycle(range(2, 255))

    def seconds(self, real_s: float) -> float:
        return max(real_s / self.scale, 0.01)

    def node_gpus(self, node: str) -> int:
        """The GPUs the node has."""
        return self.gpus

    def pod_ip(self, p: dict[str, Any]) -> str:
        """A StatefulSet pod's IP is the one its stable DNS name resolves to (see `resolve`);
        any other pod's is the next one of 127.0.90.0/24."""
        if p["spec"].get("subdomain"):
            return stable_ip(p["metadata"]["namespace"], p["metadata"]["name"])
        return f"127.0.90.{next(self.ips)}"

    # ---- where the pod's object lives ---------------------------------------------------------

    @abstractmethod
    def pod(self, rt: PodRuntime) -> dict[str, Any] | None:
        """The pod's object as it is now; None once it is gone."""

    @abstractmethod
    def update_status(self, rt: PodRuntime, fn: Callable[..., None], *args: Any) -> None:
        """`fn(pod, *args)` changes the pod's status, which is then written."""

    @abstractmethod
    def event(
        self, pod: dict[str, Any], type_: str, reason: str, message: str, source: str
    ) -> None:
        """An Event about the pod (a repeat counts up the same Event)."""

    @abstractmethod
    def services(self, ns: str) -> list[dict[str, Any]]:
        """The namespace's Services, for the Service-link variables."""

    @abstractmethod
    def lookup(self, ns: str, res: str, name: str) -> dict[str, Any] | None:
        """A ConfigMap or Secret a volume names; None when there is none."""

    @abstractmethod
    def host_ip(self, node: str) -> str:
        """The node's address, the pod's hostIP."""

    @abstractmethod
    def finish(self, rt: PodRuntime) -> None:
        """The pod's containers are gone: its object goes too."""

    @abstractmethod
    def prepare_volumes(self, rt: PodRuntime, c: dict[str, Any]) -> None:
        """A last look at the pod's volumes before its container starts (a Prometheus without
        Kubernetes discovery is pointed at HTTP discovery)."""

    def container_env(self, p: dict[str, Any], c: dict[str, Any], rt: PodRuntime) -> dict[str, str]:
        ns = rt.ns
        env: dict[str, str] = {}
        # the master Service's variables are always there; the namespace's Services' only with
        # enableServiceLinks (pkg/kubelet/kubelet_pods.go getServiceEnvVarMap)
        env |= kubernetes_service_env("kubernetes", "10.100.0.1", 443, port_name="https")
        if p["spec"].get("enableServiceLinks", True):
            for svc in self.services(ns):
                ports = svc["spec"].get("ports") or []
                ip = svc["spec"].get("clusterIP")
                if ports and ip and ip != "None":
                    first = ports[0]
                    env |= kubernetes_service_env(
                        svc["metadata"]["name"], ip, int(first["port"]), first.get("name") or ""
                    )
        for e in c.get("env") or []:
            env[e["name"]] = resolve(_expand(str(e.get("value", "")), env))
        # the device plugin's share of the node; or, for a container that requests none, what
        # the NVIDIA runtime hands it for NVIDIA_VISIBLE_DEVICES (the scheduler never counts it)
        gpus = gpu_request(p) or visible_gpus(env, self.node_gpus(rt.node))
        if gpus:
            env |= {
                "GAMEDAY_GPU": "a10g",
                "GAMEDAY_GPU_COUNT": str(gpus),
                "GAMEDAY_GPU_STATE": str(self.state_dir / "gpu" / rt.node),
            }
        env |= {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOSTNAME": rt.name,
            "HOME": os.environ.get("HOME", "/root"),
        }
        return env

    def argv(
        self, c: dict[str, Any], env: dict[str, str], ip: str, volumes: dict[str, Path]
    ) -> list[str]:
        argv = [
            resolve(_expand(a, env)) for a in [*(c.get("command") or []), *(c.get("args") or [])]
        ]
        # The container image is this interpreter's environment: its entrypoint is found there,
        # as a runtime finds it in the image, never on the test machine's PATH.
        if argv:
            argv = command_argv(argv) or argv
        # the pod's network namespace: all of its addresses are the pod IP
        for i, a in enumerate(argv):
            if a == "0.0.0.0" and i and argv[i - 1] == "--host":
                argv[i] = ip
            elif a == "--host=0.0.0.0":
                argv[i] = f"--host={ip}"
        if not argv:
            raise ValueError("no command")
        # no root filesystem of its own: mount paths name the pod's volume directories
        return kvolumes.rewrite_listen(kvolumes.rewrite(argv, kvolumes.mounts(c, volumes)), ip)

    def mount_volumes(self, rt: PodRuntime, p: dict[str, Any]) -> bool:
        """The pod's volumes as files under the state dir; False if the pod went first (a
        missing ConfigMap or Secret is retried, with FailedMount events, as the kubelet does)."""
        root = self.state_dir / "pods" / rt.uid / "volumes"
        while not rt.deleting.is_set() and not self.stopping.is_set():
            try:
                rt.volumes = kvolumes.materialise(
                    p["spec"].get("volumes") or [],
                    root,
                    lambda res, name: self.lookup(rt.ns, res, name),
                )
                return True
            except kvolumes.MissingSource as exc:
                self.event(p, "Warning", "FailedMount", str(exc), "kubelet")
                rt.deleting.wait(self.seconds(2.0))
        return False

    def run_pod(self, rt: PodRuntime) -> None:
        """The pod's life on its node, from its volumes to its deletion."""
        p = self.pod(rt)
        if p is None:
            return
        c = p["spec"]["containers"][0]
        (self.state_dir / "gpu" / rt.node).mkdir(parents=True, exist_ok=True)
        self.event(
            p,
            "Normal",
            "Pulled",
            f'Container image "{c["image"]}" already present on machine',
            "kubelet",
        )
        restarts = 0
        last_terminated: dict[str, Any] | None = None
        mounted = self.mount_volumes(rt, p)
        if mounted:
            self.prepare_volumes(rt, c)
        while mounted and not rt.deleting.is_set() and not self.stopping.is_set():
            p = self.pod(rt)
            if p is None:
                break
            env = self.container_env(p, c, rt)
            try:
                cont = self.start_container(rt, c, env)
            except OSError as exc:
                # as containerd reports an entrypoint it cannot exec: StartError, exit code 128
                msg = (
                    "failed to create containerd task: failed to create shim task: OCI runtime "
                    f"create failed: runc create failed: unable to start container process: "
                    f"exec: {exc}: unknown"
                )
                self.event(p, "Warning", "Failed", f"Error: {msg}", "kubelet")
                terminated = {
                    "exitCode": 128,
                    "reason": "StartError",
                    "message": msg,
                    "startedAt": k8s_time(now()),
                    "finishedAt": k8s_time(now()),
                    "containerID": "",
                }
            else:
                self.event(p, "Normal", "Created", f"Created container {c['name']}", "kubelet")
                self.event(p, "Normal", "Started", f"Started container {c['name']}", "kubelet")
                self.update_status(rt, self.running_status, rt, c, cont, restarts, last_terminated)
                prober = threading.Thread(target=self.probe, args=(rt, c, cont), daemon=True)
                prober.start()
                self.wait_exit(rt, cont, p)
                terminated = {
                    "exitCode": cont.exit_code,
                    "reason": "Error" if cont.exit_code else "Completed",
                    "startedAt": k8s_time(cont.started_at),
                    "finishedAt": k8s_time(cont.finished_at or now()),
                    "containerID": cont.id,
                }
            self.update_status(rt, self.terminated_status, c, terminated, restarts, last_terminated)
            if rt.deleting.is_set():
                break
            if not restarts_after(p["spec"].get("restartPolicy", "Always"), terminated):
                self.update_status(rt, completed_phase, terminated)
                rt.deleting.wait()  # a completed pod stays until it is deleted
                break
            last_terminated = terminated
            # back-off: the first restart at once, then the kubelet's schedule
            delay = 0.0 if restarts == 0 else crash_loop_backoff_s(restarts - 1)
            if delay:
                p = self.pod(rt)
                if p is None:
                    break
                msg = (
                    f"back-off {delay:g}s restarting failed container={c['name']} "
                    f"pod={rt.name}_{rt.ns}({rt.uid})"
                )
                self.update_status(rt, self.waiting_status, c, msg, restarts, last_terminated)
                self.event(
                    p,
                    "Warning",
                    "BackOff",
                    f"Back-off restarting failed container {c['name']} in pod "
                    f"{rt.name}_{rt.ns}({rt.uid})",
                    "kubelet",
                )
                if rt.deleting.wait(self.seconds(delay)):
                    break
            restarts += 1
        # the pod is gone once its containers are
        shutil.rmtree(self.state_dir / "pods" / rt.uid, ignore_errors=True)
        self.runtimes.pop(rt.uid, None)
        self.finish(rt)
        rt.gone.set()

    def start_container(self, rt: PodRuntime, c: dict[str, Any], env: dict[str, str]) -> Container:
        argv = self.argv(c, env, rt.ip, rt.volumes)
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            raise FileNotFoundError(f'"{argv[0]}": executable file not found in $PATH')
        # its own PID, UTS and mount namespaces: the command is PID 1 of its pod, its hostname
        # the pod's name, /proc shows the pod's processes only
        wrapped = [*POD_NAMESPACES, sys.executable, str(INIT), "--hostname", rt.name, "--", *argv]
        cwd = str(self.state_dir)
        proc = subprocess.Popen(
            wrapped,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
        )
        cont = Container(
            id=f"containerd://{secrets.token_hex(32)}",
            proc=proc,
            started_at=now(),
            env=env,
            cwd=cwd,
        )
        rt.containers.append(cont)
        self.started.append(cont)
        threading.Thread(target=self.read_log, args=(cont,), daemon=True).start()
        return cont

    def read_log(self, cont: Container) -> None:
        assert cont.proc.stdout is not None
        for raw in cont.proc.stdout:
            cont.log.append((now(), raw.decode(errors="replace").rstrip("\n")))

    def wait_exit(self, rt: PodRuntime, cont: Container, p: dict[str, Any]) -> None:
        while cont.proc.poll() is None:
            if rt.deleting.wait(0.02):
                self.event(
                    p,
                    "Normal",
                    "Killing",
                    f"Stopping container {p['spec']['containers'][0]['name']}",
                    "kubelet",
                )
                # the grace period the deletion set; none left when the pod is already gone
                now_p = self.pod(rt)
                grace = (now_p or p)["metadata"].get("deletionGracePeriodSeconds")
                if now_p is None:
                    grace = 0
                elif grace is None:
                    grace = p["spec"].get("terminationGracePeriodSeconds", 30)
                self.kill(cont, self.seconds(float(grace)))
                break
        rc = cont.proc.wait()
        cont.finished_at = now()
        cont.exit_code = 128 - rc if rc < 0 else rc
        time.sleep(0.01)  # the log reader drains the pipe

    def kill(self, cont: Container, grace_s: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cont.proc.pid, signal.SIGTERM)
        try:
            cont.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(cont.proc.pid, signal.SIGKILL)

    def probe(self, rt: PodRuntime, c: dict[str, Any], cont: Container) -> None:
        startup, readiness = c.get("startupProbe"), c.get("readinessProbe")
        ports = {pt.get("name"): pt["containerPort"] for pt in c.get("ports") or []}
        with httpx.Client(timeout=1.0) as http:

            def check(spec: dict[str, Any]) -> str | None:
                get = spec["httpGet"]
                port = get["port"]
                port = ports.get(port, port) if isinstance(port, str) else port
                url = f"http://{rt.ip}:{port}{get.get('path', '/')}"
                try:
                    r = http.get(url)
                except httpx.ConnectError:
                    return f'Get "{url}": dial tcp {rt.ip}:{port}: connect: connection refused'
                except httpx.HTTPError as exc:
                    return f'Get "{url}": {type(exc).__name__}'
                if 200 <= r.status_code < 400:
                    return None
                return f"HTTP probe failed with statuscode: {r.status_code}"

            def alive() -> bool:
                return cont.proc.poll() is None and not rt.deleting.is_set()

            if startup:
                fails = 0
                while alive():
                    err = check(startup)
                    if err is None:
                        break
                    if not alive():
                        return
                    fails += 1
                    p = self.pod(rt)
                    if p is not None:
                        self.event(
                            p, "Warning", "Unhealthy", f"Startup probe failed: {err}", "kubelet"
                        )
                    if fails >= int(startup.get("failureThreshold", 3)):
                        if p is not None:
                            self.event(
                                p,
                                "Normal",
                                "Killing",
                                f"Container {c['name']} failed startup probe, will be restarted",
                                "kubelet",
                            )
                        cont.killed_by_probe = True
                        self.kill(
                            cont,
                            self.seconds(
                                float(
                                    p["spec"].get("terminationGracePeriodSeconds", 30) if p else 1
                                )
                            ),
                        )
                        return
                    time.sleep(self.seconds(float(startup.get("periodSeconds", 10))))
            if not readiness:
                self.set_ready(rt, cont, alive())
                return
            fails = 0
            while alive():
                err = check(readiness)
                if not alive():
                    return
                if err is None:
                    fails = 0
                    self.set_ready(rt, cont, True)
                else:
                    fails += 1
                    p = self.pod(rt)
                    if p is not None:
                        self.event(
                            p, "Warning", "Unhealthy", f"Readiness probe failed: {err}", "kubelet"
                        )
                    if fails >= int(readiness.get("failureThreshold", 3)):
                        self.set_ready(rt, cont, False)
                time.sleep(self.seconds(float(readiness.get("periodSeconds", 10))))

    def set_ready(self, rt: PodRuntime, cont: Container, ready: bool) -> None:
        p = self.pod(rt)
        if p is None or not p["status"].get("containerStatuses"):
            return
        cs = p["status"]["containerStatuses"][0]
        if cs.get("containerID") != cont.id or cs.get("ready") == ready:
            return

        def upd(p: dict[str, Any]) -> None:
            p["status"]["containerStatuses"][0]["ready"] = ready
            p["status"]["conditions"] = conditions(p, ready)

        self.update_status(rt, upd)

    # ---- pod status shapes ----------------------------------------------------------------------

    def running_status(
        self,
        p: dict[str, Any],
        rt: PodRuntime,
        c: dict[str, Any],
        cont: Container,
        restarts: int,
        last: dict[str, Any] | None,
    ) -> None:
        p["status"].update(
            phase="Running",
            hostIP=self.host_ip(rt.node),
            podIP=rt.ip,
            podIPs=[{"ip": rt.ip}],
            startTime=p["status"].get("startTime") or k8s_time(cont.started_at),
        )
        p["status"]["containerStatuses"] = [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "containerID": cont.id,
                "ready": False,
                "started": False,
                "restartCount": restarts,
                "state": {"running": {"startedAt": k8s_time(cont.started_at)}},
                "lastState": {"terminated": last} if last else {},
            }
        ]
        p["status"]["conditions"] = conditions(p, False)

    def terminated_status(
        self,
        p: dict[str, Any],
        c: dict[str, Any],
        term: dict[str, Any],
        restarts: int,
        last: dict[str, Any] | None,
    ) -> None:
        cs = p["status"]["containerStatuses"][0]
        cs.update(ready=False, started=False, restartCount=restarts, state={"terminated": term})
        cs["lastState"] = {"terminated": last} if last else {}
        p["status"]["conditions"] = conditions(p, False)

    def waiting_status(
        self,
        p: dict[str, Any],
        c: dict[str, Any],
        message: str,
        restarts: int,
        last: dict[str, Any] | None,
    ) -> None:
        cs = p["status"]["containerStatuses"][0]
        cs.update(
            ready=False,
            started=False,
            restartCount=restarts,
            state={"waiting": {"reason": "CrashLoopBackOff", "message": message}},
            lastState={"terminated": last} if last else {},
        )
        p["status"]["conditions"] = conditions(p, False)

    # ---- exec (the API server's and the kubelet's checks before the upgrade) -------------------

    def exec_target(self, p: dict[str, Any], container: str | None) -> Container:
        name = p["metadata"]["name"]
        if not p["spec"].get("nodeName"):
            raise ApiError(400, "BadRequest", f"pod {name} does not have a host assigned")
        names = [c["name"] for c in p["spec"]["containers"]]
        cname = container or names[0]
        if cname not in names:
            raise ApiError(400, "BadRequest", f"container {cname} is not valid for pod {name}")
        rt = self.runtimes.get(p["metadata"]["uid"])
        statuses = p["status"].get("containerStatuses") or []
        cid = statuses[0].get("containerID") if statuses else None
        running = bool(statuses) and "running" in statuses[0].get("state", {})
        cont = next((x for x in rt.containers if x.id == cid), None) if rt else None
        if cont is None or not running or cont.proc.poll() is not None:
            raise ApiError(400, "BadRequest", f'container not found ("{cname}")')
        return cont

    # ---- logs (the kubelet's containerLogs, validateContainerLogStatus) ------------------------

    def logs(
        self, p: dict[str, Any], previous: bool, timestamps: bool, tail: int | None = None
    ) -> str:
        """The container's log as the kubelet's containerLogs serves it (`tail`: the last lines)."""
        name = p["metadata"]["name"]
        rt = self.runtimes.get(p["metadata"]["uid"])
        statuses = p["status"].get("containerStatuses") or []
        cname = p["spec"]["containers"][0]["name"]
        if rt is None or not statuses:
            raise ApiError(
                400,
                "BadRequest",
                f'container "{cname}" in pod "{name}" is waiting to start: ContainerCreating',
            )
        cs = statuses[0]
        state, last = cs.get("state", {}), (cs.get("lastState") or {}).get("terminated")
        if previous:
            if not last:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'previous terminated container "{cname}" in pod "{name}" not found',
                )
            cid = last["containerID"]
        elif "running" in state:
            cid = cs["containerID"]
        elif "terminated" in state:
            cid = state["terminated"]["containerID"]
        elif last:
            cid = last["containerID"]
        else:
            reason = state.get("waiting", {}).get("reason", "ContainerCreating")
            raise ApiError(
                400,
                "BadRequest",
                f'container "{cname}" in pod "{name}" is waiting to start: {reason}',
            )
        cont = next((x for x in rt.containers if x.id == cid), None)
        if cont is None:
            return ""
        lines = list(cont.log)
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "".join(
            (f"{k8s_nano(ts)} {text}\n" if timestamps else f"{text}\n") for ts, text in lines
        )

    def stop_containers(self) -> None:
        """Kill every container this runtime ever started, whichever pod it belonged to."""
        self.stopping.set()  # no container starts from here on
        runtimes = list(self.runtimes.values())
        for rt in runtimes:
            rt.deleting.set()
        for rt in runtimes:
            rt.gone.wait(5)
        for cont in list(self.started):
            if cont.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(cont.proc.pid, signal.SIGKILL)
                cont.proc.wait()


_POD_DNS = re.compile(
    r"\b(?P<pod>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<svc>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"\.(?P<ns>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?\b"
)


_STABLE_IPS: dict[tuple[str, str], str] = {}
_STABLE_LOCK = threading.Lock()


def event_object(
    pod: dict[str, Any], type_: str, reason: str, message: str, source: str, name: str, t: str
) -> dict[str, Any]:
    """A core/v1 Event about the pod, first seen at `t`, as its reporter writes it (a kubelet's
    names the pod's container)."""
    meta, node = pod["metadata"], pod["spec"].get("nodeName", "")
    container = pod["spec"]["containers"][0]["name"]
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "v1",
            "fieldPath": f"spec.containers{{{container}}}" if source == "kubelet" else None,
        },
        "reason": reason,
        "message": message,
        "source": {"component": source, "host": node},
        "firstTimestamp": t,
        "lastTimestamp": t,
        "count": 1,
        "type": type_,
        "reportingComponent": source,
        "reportingInstance": node,
    }


def stable_ip(ns: str, pod: str) -> str:
    """The IP of the pod of that name: the same for every pod of the name, and no other name's
    (a hash of the name collided: two ranks of one group on one address)."""
    with _STABLE_LOCK:
        ip = _STABLE_IPS.get((ns, pod))
        if ip is None:
            n = len(_STABLE_IPS)
            if n >= 253 * 250:
                raise RuntimeError("the stand-in has no stable pod IP left")
            ip = f"127.0.{91 + n // 253}.{2 + n % 253}"
            _STABLE_IPS[(ns, pod)] = ip
        return ip


def resolve(value: str) -> str:
    """Cluster DNS for a process that cannot use it: a StatefulSet pod's name
    (`<pod>.<service>.<namespace>.svc[.cluster.local]`) becomes the pod's IP, which is stable
    (`stable_ip`), as the name is on a cluster."""
    return _POD_DNS.sub(lambda m: stable_ip(m.group("ns"), m.group("pod")), value)


def _expand(s: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion; $$ escapes."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        s,
    )


def restarts_after(policy: str, terminated: dict[str, Any]) -> bool:
    """Whether the kubelet restarts a container that ended so, under the pod's restartPolicy."""
    return policy == "Always" or (policy == "OnFailure" and terminated["exitCode"] != 0)


def completed_phase(p: dict[str, Any], terminated: dict[str, Any]) -> None:
    p["status"]["phase"] = "Failed" if terminated["exitCode"] else "Succeeded"


def visible_gpus(env: dict[str, str], node_gpus: int) -> int:
    """The GPUs the NVIDIA container runtime hands a container for its NVIDIA_VISIBLE_DEVICES,
    whatever the device plugin allocated: `all`, or a list of indices that exist on the node."""
    value = env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if value == "all":
        return node_gpus
    indices = {v.strip() for v in value.split(",")}
    return sum(1 for i in range(node_gpus) if str(i) in indices)


def gpu_request(p: dict[str, Any]) -> int:
    total = 0
    for c in p["spec"].get("containers") or []:
        res = c.get("resources") or {}
        val = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += int(val or 0)
    return total


def pod_ready(p: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in p.get("status", {}).get("conditions") or []
    )


def conditions(p: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
    t = k8s_time(now())
    r = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
        {"type": "Initialized", "status": "True", "lastTransitionTime": t},
        {"type": "ContainersReady", "status": r, "lastTransitionTime": t},
        {"type": "Ready", "status": r, "lastTransitionTime": t},
    ]
