"""A stand-in Kubernetes API server for the Kubernetes lab's tests (no real one installs here).

It speaks the real REST wire format (paths, JSON objects, Status errors, list resourceVersions,
chunked watch streams of `{"type", "object"}` lines, `410 Expired`) for exactly the calls
runner.labs.kubernetes makes, and behind it does what the control plane and a kubelet do for them:

- Deployments (`strategy: Recreate`): old pods are deleted and gone before the new one is
  created; a deleted pod is replaced at once (as its ReplicaSet would).
- StatefulSets: pods `<name>-<ordinal>`, a replacement created only once the pod of that name is
  gone, `hostname`/`subdomain` set; cluster DNS for them (`<pod>.<service>.<ns>.svc...`) is
  resolved in the container's args and env at start to the pod's IP, which is stable per pod name
  (127.0.91.x): a lab-engine process cannot ask a cluster's DNS.
- A scheduler over `--nodes` GPU nodes (`nvidia.com/gpu` allocatable, one each by default, the
  GPU taint and labels): a pod that finds no free GPU stays Pending (FailedScheduling), a GPU held
  by a terminating pod included.
- A kubelet that runs each container as a lab-engine process: env from the container spec plus
  the Service-link variables of every Service in the namespace when `enableServiceLinks` is true
  (pkg/kubelet/envvars), `$(VAR)` expansion in args; the pod's own loopback IP (127.0.90.x) as
  its network namespace (`--host 0.0.0.0` binds the pod IP); startup and readiness probes with
  `Unhealthy` Events; restart back-off (immediate first restart, then 10 s doubling to 300 s)
  with `CrashLoopBackOff`; `lastState.terminated`; logs with RFC 3339 nanosecond timestamps,
  current and `previous`, with the kubelet's 400s.
- Times in objects have whole seconds, as the API server writes them.
- Each container runs in its own PID, UTS and mount namespace (`unshare`, then init.py sets the
  hostname to the pod's name): its command is PID 1 of the pod, `/proc` shows the pod's processes.
- `pods/{name}/exec` over a WebSocket (`v4.channel.k8s.io`), inside those namespaces (exec.py).
- Bare pods (`POST pods`): `spec.nodeName` binds past the scheduler, `restartPolicy` is honoured,
  a completed pod stays Succeeded/Failed, a deleted one is gone. A container that requests no
  `nvidia.com/gpu` but sets `NVIDIA_VISIBLE_DEVICES` (`all` or indices) gets the node's GPUs, as
  the NVIDIA runtime hands them out; the scheduler does not count it.
- ConfigMaps, Secrets, ServiceAccounts, Roles and RoleBindings are stored and served (CRUD,
  resourceVersion conflicts); volumes of the first two, `emptyDir` and `projected` are files in a
  per-pod directory, and mount paths in a container's command and args are rewritten to it; see
  volumes.py. `--web.listen-address=0.0.0.0:P` / `:P` bind the pod IP.
- Prometheus HTTP service discovery of a namespace's pods with role `pod`'s labels (httpsd.py):
  Debian's Prometheus has no kubernetes_sd.

Every period (probe, back-off, grace) is divided by `--time-scale`, like the lab engine's phases.
Run: `python -m tests.kubeapi --port 16443 --kubeconfig build/kubeapi/kubeconfig`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import itertools
import json
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import yaml

from runner.labs.common.helpers import crash_loop_backoff_s
from runner.labs.common.servicelinks import kubernetes_service_env
from runner.programs import command_argv
from tests.kubeapi import exec as kexec
from tests.kubeapi import httpsd
from tests.kubeapi import volumes as kvolumes
from tests.support import kube_sd

NODE_PREFIX = "gameday-testserver-gpu-"  # g5.xlarge-like nodes, one GPU each
GPU_RESOURCE = "nvidia.com/gpu"
NODE_LABELS = {"nvidia.com/gpu.present": "true", "node.kubernetes.io/instance-type": "g5.xlarge"}
NODE_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
HISTORY = 20000
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


# ---- the store: objects, resourceVersions, watch history --------------------------------------


@dataclass
class Watcher:
    resource: str
    namespace: str | None
    match: Callable[[dict[str, Any]], bool]
    q: queue.Queue[tuple[str, dict[str, Any]] | None] = field(default_factory=queue.Queue)


class Store:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = itertools.count(1000)
        self.last_rv = 1000
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.watchers: list[Watcher] = []

    def _record(self, resource: str, ns: str, type_: str, obj: dict[str, Any]) -> None:
        rv = next(self.rv)
        self.last_rv = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        snap = copy.deepcopy(obj)
        self.history.append((rv, resource, ns, type_, snap))
        del self.history[:-HISTORY]
        for w in list(self.watchers):
            if w.resource == resource and w.namespace in (None, ns) and w.match(snap):
                w.q.put((type_, snap))
        self.changed.notify_all()

    def get(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get((resource, ns, name))

    def put(self, resource: str, ns: str, obj: dict[str, Any], type_: str) -> dict[str, Any]:
        with self.lock:
            self.objects[(resource, ns, obj["metadata"]["name"])] = obj
            self._record(resource, ns, type_, obj)
            return copy.deepcopy(obj)

    def remove(self, resource: str, ns: str, name: str) -> None:
        with self.lock:
            obj = self.objects.pop((resource, ns, name), None)
            if obj is not None:
                self._record(resource, ns, "DELETED", obj)

    def list(self, resource: str, ns: str | None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (r, n, _), o in self.objects.items()
                if r == resource and ns in (None, n)
            ]


# ---- selectors ------------------------------------------------------------------------------


def label_matcher(sel: str | None) -> Callable[[dict[str, Any]], bool]:
    reqs: list[tuple[str, str, str]] = []
    for part in filter(None, (sel or "").split(",")):
        m = re.fullmatch(r"\s*([^!=\s]+)\s*(==|=|!=)\s*([^\s]*)\s*", part)
        if m:
            reqs.append((m.group(1), m.group(2), m.group(3)))
        else:
            key = part.strip().lstrip("!")
            reqs.append((key, "exists" if not part.strip().startswith("!") else "!exists", ""))

    def match(obj: dict[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        for k, op, v in reqs:
            if op in ("=", "==") and labels.get(k) != v:
                return False
            if op == "!=" and labels.get(k) == v:
                return False
            if op == "exists" and k not in labels:
                return False
            if op == "!exists" and k in labels:
                return False
        return True

    return match


def field_matcher(sel: str | None) -> Callable[[dict[str, Any]], bool]:
    reqs = [p.split("=", 1) for p in filter(None, (sel or "").split(","))]

    def lookup(obj: Any, path: str) -> Any:
        for part in path.split("."):
            obj = obj.get(part) if isinstance(obj, dict) else None
        return obj

    return lambda obj: all(str(lookup(obj, k.rstrip("="))) == v for k, v in reqs)


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


class Cluster:
    def __init__(self, time_scale: float, state_dir: Path, gpus: int, nodes: int = 1) -> None:
        self.scale = time_scale
        self.state_dir = state_dir
        self.gpus = gpus  # per node
        self.nodes = [f"{NODE_PREFIX}{i + 1}" for i in range(nodes)]
        self.store = Store()
        self.runtimes: dict[str, PodRuntime] = {}
        self.ips = itertools.cycle(range(2, 255))
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.started: list[Container] = []  # every container ever started, for stop()
        self.bound: set[str] = set()  # uids of the pods a kubelet has taken
        self.ensure_default_namespace()
        threading.Thread(target=self.controllers, name="controllers", daemon=True).start()

    def seconds(self, real_s: float) -> float:
        return max(real_s / self.scale, 0.01)

    def ensure_default_namespace(self) -> None:
        for name in ("default", "kube-system"):
            self.store.put(
                "namespaces", "", self.new_meta({"kind": "Namespace"}, name, ""), "ADDED"
            )

    # ---- object basics ------------------------------------------------------------------------

    def new_meta(self, obj: dict[str, Any], name: str, ns: str) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta["name"] = name
        if ns:
            meta["namespace"] = ns
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = k8s_time(now())
        return obj

    def require_namespace(self, ns: str) -> dict[str, Any]:
        obj = self.store.get("namespaces", "", ns)
        if obj is None:
            raise not_found("namespaces", ns)
        return obj

    # ---- events ---------------------------------------------------------------------------------

    def event(
        self, pod: dict[str, Any], type_: str, reason: str, message: str, source: str
    ) -> None:
        meta = pod["metadata"]
        ns = meta["namespace"]
        with self.store.lock:
            for e in self.store.list("events", ns):
                io = e["involvedObject"]
                if io["uid"] == meta["uid"] and e["reason"] == reason and e["message"] == message:
                    e["count"] += 1
                    e["lastTimestamp"] = k8s_time(now())
                    self.store.put("events", ns, e, "MODIFIED")
                    return
            t = k8s_time(now())
            e = {
                "kind": "Event",
                "apiVersion": "v1",
                "metadata": {
                    "name": f"{meta['name']}.{secrets.token_hex(8)}",
                    "namespace": ns,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": t,
                },
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": ns,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "apiVersion": "v1",
                    "fieldPath": "spec.containers{vllm}" if source == "kubelet" else None,
                },
                "reason": reason,
                "message": message,
                "source": {"component": source, "host": pod["spec"].get("nodeName", "")},
                "firstTimestamp": t,
                "lastTimestamp": t,
                "count": 1,
                "type": type_,
                "reportingComponent": source,
                "reportingInstance": pod["spec"].get("nodeName", ""),
            }
            self.store.put("events", ns, e, "ADDED")

    # ---- controllers: Deployment (Recreate), StatefulSet, and the scheduler --------------------

    def controllers(self) -> None:
        while not self.stopping.is_set():
            self.wake.wait(0.05)
            self.wake.clear()
            with contextlib.suppress(Exception), self.store.lock:
                for d in self.store.list("deployments", None):
                    self.reconcile(d)
                for sts in self.store.list("statefulsets", None):
                    self.reconcile_sts(sts)
                self.schedule()

    def template_hash(self, d: dict[str, Any]) -> str:
        raw = json.dumps(d["spec"]["template"], sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:10]

    def owned(self, d: dict[str, Any]) -> list[dict[str, Any]]:
        uid = d["metadata"]["uid"]
        return [
            p
            for p in self.store.list("pods", d["metadata"]["namespace"])
            if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences", []))
        ]

    def reconcile(self, d: dict[str, Any]) -> None:
        ns = d["metadata"]["namespace"]
        want = self.template_hash(d)
        pods = self.owned(d)
        old = [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") != want]
        for p in old:
            if not p["metadata"].get("deletionTimestamp"):
                self.delete_pod(ns, p["metadata"]["name"], None)
        if old:
            return  # Recreate: the new pod waits until every old one is gone
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        replicas = int(d["spec"].get("replicas", 1))
        for p in live[replicas:]:  # scaled down
            self.delete_pod(ns, p["metadata"]["name"], None)
        live = live[:replicas]
        for _ in range(replicas - len(live)):
            self.create_pod(d, want)
        ready = sum(1 for p in live if _pod_ready(p))
        status = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": len(live),
            "updatedReplicas": len(live),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if d.get("status") != status:
            d["status"] = status
            self.store.put("deployments", ns, d, "MODIFIED")

    def reconcile_sts(self, sts: dict[str, Any]) -> None:
        """Pods `<name>-<ordinal>`, each created only once its predecessor of the same name is
        gone; a changed template replaces them (RollingUpdate)."""
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        want = self.template_hash(sts)
        pods = {p["metadata"]["name"]: p for p in self.owned(sts)}
        replicas = int(sts["spec"].get("replicas", 1))
        for pname, p in pods.items():  # scaled down: ordinals from `replicas` on go
            ordinal = int(pname.rsplit("-", 1)[1])
            if ordinal >= replicas and not p["metadata"].get("deletionTimestamp"):
                self.delete_pod(ns, pname, None)
        ready = 0
        for i in range(int(sts["spec"].get("replicas", 1))):
            pod = pods.get(f"{name}-{i}")
            if pod is None:
                if self.store.get("pods", ns, f"{name}-{i}") is None:
                    self.create_pod(sts, want, ordinal=i)
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["metadata"]["labels"].get("controller-revision-hash") != want:
                self.delete_pod(ns, pod["metadata"]["name"], None)
            elif _pod_ready(pod):
                ready += 1
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": int(sts["spec"].get("replicas", 1)),
            "readyReplicas": ready,
            "currentRevision": f"{name}-{want}",
            "updateRevision": f"{name}-{want}",
        }
        if sts.get("status") != status:
            sts["status"] = status
            self.store.put("statefulsets", ns, sts, "MODIFIED")

    def create_pod(self, d: dict[str, Any], template_hash: str, ordinal: int | None = None) -> None:
        tmpl = copy.deepcopy(d["spec"]["template"])
        ns = d["metadata"]["namespace"]
        owner = d["metadata"]["name"]
        pod: dict[str, Any] = {"kind": "Pod", "apiVersion": "v1", "metadata": tmpl["metadata"]}
        labels = dict(tmpl["metadata"].get("labels") or {})
        if ordinal is None:  # a Deployment's, through its ReplicaSet
            name = f"{owner}-{template_hash[:9]}-{secrets.token_hex(3)[:5]}"
            labels["pod-template-hash"] = template_hash
            ref = {"kind": "ReplicaSet", "name": f"{owner}-{template_hash[:9]}"}
        else:  # a StatefulSet's: a stable name, and a DNS name under its headless Service
            name = f"{owner}-{ordinal}"
            labels |= {
                "controller-revision-hash": template_hash,
                "statefulset.kubernetes.io/pod-name": name,
                "apps.kubernetes.io/pod-index": str(ordinal),
            }
            ref = {"kind": "StatefulSet", "name": owner}
            tmpl["spec"]["hostname"] = name
            tmpl["spec"]["subdomain"] = d["spec"]["serviceName"]
        self.new_meta(pod, name, ns)
        pod["metadata"]["labels"] = labels
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                **ref,
                "uid": d["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        spec = tmpl["spec"]
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        pod["spec"] = spec
        pod["status"] = {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [],
        }
        self.store.put("pods", ns, pod, "ADDED")

    def gpus_in_use(self, node: str) -> int:
        return sum(
            _gpu_request(p)
            for p in self.store.list("pods", None)
            if p["spec"].get("nodeName") == node
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        )

    def schedule(self) -> None:
        for p in self.store.list("pods", None):
            if p["metadata"]["uid"] in self.bound or p["metadata"].get("deletionTimestamp"):
                continue
            if p["spec"].get("nodeName"):  # pinned: the scheduler never sees it
                if p["spec"]["nodeName"] in self.nodes:  # no such node: no kubelet, Pending
                    self.bind(p, p["spec"]["nodeName"])
                continue
            why, node = self.unschedulable(p)
            conds = p["status"].setdefault("conditions", [])
            if why:
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": why,
                    "lastTransitionTime": k8s_time(now()),
                }
                if not any(c.get("message") == why for c in conds):
                    p["status"]["conditions"] = [cond]
                    self.store.put("pods", p["metadata"]["namespace"], p, "MODIFIED")
                    self.event(p, "Warning", "FailedScheduling", why, "default-scheduler")
                continue
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            self.event(
                p,
                "Normal",
                "Scheduled",
                f"Successfully assigned {ns}/{name} to {node}",
                "default-scheduler",
            )
            self.bind(p, node)

    def bind(self, p: dict[str, Any], node: str) -> None:
        """The pod on its node: the node's kubelet starts it."""
        p["spec"]["nodeName"] = node
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": k8s_time(now())}
        ]
        self.store.put("pods", p["metadata"]["namespace"], p, "MODIFIED")
        uid = p["metadata"]["uid"]
        self.bound.add(uid)
        rt = PodRuntime(p["metadata"]["namespace"], p["metadata"]["name"], uid, self.pod_ip(p))
        rt.node = node
        self.runtimes[uid] = rt
        threading.Thread(target=self.kubelet, args=(rt,), daemon=True).start()

    def pod_ip(self, p: dict[str, Any]) -> str:
        """A StatefulSet pod's IP is the one its stable DNS name resolves to (see `resolve`);
        any other pod's is the next free one."""
        if p["spec"].get("subdomain"):
            return stable_ip(p["metadata"]["namespace"], p["metadata"]["name"])
        return f"127.0.90.{next(self.ips)}"

    def unschedulable(self, p: dict[str, Any]) -> tuple[str | None, str]:
        """(why not, "") or (None, the node)."""
        n = len(self.nodes)
        sel = p["spec"].get("nodeSelector") or {}
        if any(NODE_LABELS.get(k) != v for k, v in sel.items()):
            why = (
                f"0/{n} nodes are available: {n} node(s) didn't match Pod's node affinity/selector."
            )
            return why, ""
        tolerated = all(
            any(
                t.get("key") == taint["key"]
                and t.get("effect") in (None, "", taint["effect"])
                and (t.get("operator") == "Exists" or t.get("value") == taint["value"])
                for t in p["spec"].get("tolerations") or []
            )
            for taint in NODE_TAINTS
        )
        if not tolerated and _gpu_request(p):
            return (
                f"0/{n} nodes are available: {n} node(s) had untolerated taint "
                "{nvidia.com/gpu: true}."
            ), ""
        for node in self.nodes:
            if self.gpus_in_use(node) + _gpu_request(p) <= self.gpus:
                return None, node
        return f"0/{n} nodes are available: {n} Insufficient {GPU_RESOURCE}.", ""

    # ---- deletion ---------------------------------------------------------------------------

    def delete_pod(self, ns: str, name: str, grace: int | None) -> dict[str, Any]:
        with self.store.lock:
            p = self.store.get("pods", ns, name)
            if p is None:
                raise not_found("pods", name)
            if not p["metadata"].get("deletionTimestamp"):
                g = p["spec"].get("terminationGracePeriodSeconds", 30) if grace is None else grace
                p["metadata"]["deletionTimestamp"] = k8s_time(now())
                p["metadata"]["deletionGracePeriodSeconds"] = g
                out = self.store.put("pods", ns, p, "MODIFIED")
            else:
                out = copy.deepcopy(p)
            rt = self.runtimes.get(p["metadata"]["uid"])
        if rt is None:
            self.store.remove("pods", ns, name)
        else:
            rt.deleting.set()
        self.wake.set()
        return out

    # ---- the kubelet ------------------------------------------------------------------------

    def pod(self, rt: PodRuntime) -> dict[str, Any] | None:
        return self.store.get("pods", rt.ns, rt.name)

    def update_status(self, rt: PodRuntime, fn: Callable[..., None], *args: Any) -> None:
        with self.store.lock:
            p = self.pod(rt)
            if p is None:
                return
            fn(p, *args)
            self.store.put("pods", rt.ns, p, "MODIFIED")
        self.wake.set()

    def container_env(self, p: dict[str, Any], c: dict[str, Any], rt: PodRuntime) -> dict[str, str]:
        ns = rt.ns
        env: dict[str, str] = {}
        # the master Service's variables are always there; the namespace's Services' only with
        # enableServiceLinks (pkg/kubelet/kubelet_pods.go getServiceEnvVarMap)
        env |= kubernetes_service_env("kubernetes", "10.100.0.1", 443, port_name="https")
        if p["spec"].get("enableServiceLinks", True):
            for svc in self.store.list("services", ns):
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
        gpus = _gpu_request(p) or visible_gpus(env, self.gpus)
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
                    lambda res, name: self.store.get(res, rt.ns, name),
                )
                return True
            except kvolumes.MissingSource as exc:
                self.event(p, "Warning", "FailedMount", str(exc), "kubelet")
                rt.deleting.wait(self.seconds(2.0))
        return False

    def kubelet(self, rt: PodRuntime) -> None:
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
        if mounted and str(c["image"]).startswith("prom/prometheus:"):
            # the system's Prometheus (Debian's) is built without Kubernetes discovery: its pod
            # discovery asks this server's HTTP service discovery instead (httpsd.py)
            # and it has no cluster DNS: an Alertmanager named by its Service's DNS name is
            # reached through the Service's pods
            services = self.store.list("services", rt.ns)
            for d in rt.volumes.values():
                kube_sd.rewrite_config(d, services)
        while mounted and not rt.deleting.is_set() and not self.stopping.is_set():
            p = self.pod(rt)
            if p is None:
                break
            env = self.container_env(p, c, rt)
            try:
                cont = self.start(rt, c, env)
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
        self.store.remove("pods", rt.ns, rt.name)
        rt.gone.set()
        self.wake.set()

    def start(self, rt: PodRuntime, c: dict[str, Any], env: dict[str, str]) -> Container:
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
                grace = p["metadata"].get("deletionGracePeriodSeconds")
                if grace is None:
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
            p["status"]["conditions"] = _conditions(p, ready)

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
            hostIP=f"127.0.89.{self.nodes.index(rt.node) + 1}",
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
        p["status"]["conditions"] = _conditions(p, False)

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
        p["status"]["conditions"] = _conditions(p, False)

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
        p["status"]["conditions"] = _conditions(p, False)

    # ---- exec (the API server's and the kubelet's checks before the upgrade) -------------------

    def exec_target(self, ns: str, name: str, container: str | None) -> Container:
        p = self.store.get("pods", ns, name)
        if p is None:
            raise not_found("pods", name)
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

    def logs(self, ns: str, name: str, previous: bool, timestamps: bool) -> str:
        p = self.store.get("pods", ns, name)
        if p is None:
            raise not_found("pods", name)
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
        return "".join(
            (f"{k8s_nano(ts)} {text}\n" if timestamps else f"{text}\n") for ts, text in lines
        )


_POD_DNS = re.compile(
    r"\b(?P<pod>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<svc>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"\.(?P<ns>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?\b"
)


_STABLE_IPS: dict[tuple[str, str], str] = {}
_STABLE_LOCK = threading.Lock()


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


def _gpu_request(p: dict[str, Any]) -> int:
    total = 0
    for c in p["spec"].get("containers") or []:
        res = c.get("resources") or {}
        val = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += int(val or 0)
    return total


def _pod_ready(p: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in p.get("status", {}).get("conditions") or []
    )


def _conditions(p: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
    t = k8s_time(now())
    r = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
        {"type": "Initialized", "status": "True", "lastTransitionTime": t},
        {"type": "ContainersReady", "status": r, "lastTransitionTime": t},
        {"type": "Ready", "status": r, "lastTransitionTime": t},
    ]


# ---- the REST front ------------------------------------------------------------------------

CORE = r"/api/v1"
APPS = r"/apis/apps/v1"
RBAC = "rbac.authorization.k8s.io"
ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("namespaces", re.compile(rf"^{CORE}/namespaces(?:/(?P<name>[^/]+))?$")),
    (
        "core",
        re.compile(
            rf"^{CORE}/namespaces/(?P<ns>[^/]+)/(?P<res>pods|services|events|configmaps|secrets|serviceaccounts)"
            r"(?:/(?P<name>[^/]+))?(?P<log>/log)?$"
        ),
    ),
    (
        "rbac",
        re.compile(
            rf"^/apis/{RBAC}/v1/namespaces/(?P<ns>[^/]+)/(?P<res>roles|rolebindings)"
            r"(?:/(?P<name>[^/]+))?$"
        ),
    ),
    (
        "apps",
        re.compile(
            rf"^{APPS}/namespaces/(?P<ns>[^/]+)/(?P<res>deployments|statefulsets)"
            r"(?:/(?P<name>[^/]+))?$"
        ),
    ),
]
EXEC = re.compile(rf"^{CORE}/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/exec$")
WORKLOADS = ("deployments", "statefulsets")
# objects the stand-in stores and serves without acting on them (volumes read the first two)
GENERIC = ("configmaps", "secrets", "serviceaccounts", "roles", "rolebindings")
KINDS = {
    "pods": ("Pod", "v1"),
    "services": ("Service", "v1"),
    "events": ("Event", "v1"),
    "deployments": ("Deployment", "apps/v1"),
    "statefulsets": ("StatefulSet", "apps/v1"),
    "namespaces": ("Namespace", "v1"),
    "configmaps": ("ConfigMap", "v1"),
    "secrets": ("Secret", "v1"),
    "serviceaccounts": ("ServiceAccount", "v1"),
    "roles": ("Role", f"{RBAC}/v1"),
    "rolebindings": ("RoleBinding", f"{RBAC}/v1"),
}


class Api:
    def __init__(self, cluster: Cluster, token: str) -> None:
        self.c = cluster
        self.token = token

    # a handler returns (status, body) or a generator of watch events
    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any] | Iterator[dict[str, Any]]:
        sd = httpsd.PATH.match(path)
        if sd and method == "GET":
            return 200, httpsd.target_groups(self.c.store.list("pods", sd.group("ns")))
        for kind, rx in ROUTES:
            m = rx.match(path)
            if not m:
                continue
            g = m.groupdict()
            if kind == "namespaces":
                return self.namespaces(method, g.get("name"), query, body)
            res, ns, name = g["res"], g["ns"], g.get("name")
            if g.get("log"):
                if method != "GET" or name is None:
                    raise ApiError(405, "MethodNotAllowed", "method not allowed")
                text = self.c.logs(
                    ns, name, _true(query.get("previous")), _true(query.get("timestamps"))
                )
                return 200, text
            return self.namespaced(method, res, ns, name, query, body)
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({path})"
        )

    def listing(
        self, res: str, ns: str | None, query: dict[str, str]
    ) -> tuple[int, Any] | Iterator[dict[str, Any]]:
        lm, fm = (
            label_matcher(query.get("labelSelector")),
            field_matcher(query.get("fieldSelector")),
        )

        def match(o: dict[str, Any]) -> bool:
            return lm(o) and fm(o)

        if _true(query.get("watch")):
            return self.watch(res, ns, match, query)
        with self.c.store.lock:
            items = [o for o in self.c.store.list(res, ns) if match(o)]
            rv = str(self.c.store.last_rv)
        kind, api = KINDS[res]
        return 200, {
            "kind": f"{kind}List",
            "apiVersion": api,
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    def watch(
        self,
        res: str,
        ns: str | None,
        match: Callable[[dict[str, Any]], bool],
        query: dict[str, str],
    ) -> Iterator[dict[str, Any]]:
        store = self.c.store
        timeout = float(query.get("timeoutSeconds") or 1800)
        since = int(query.get("resourceVersion") or 0)
        w = Watcher(res, ns, match)
        with store.lock:
            backlog: list[tuple[str, dict[str, Any]]] = []
            if since:
                if store.history and since < store.history[0][0] - 1:
                    expired = ApiError(410, "Expired", f"too old resource version: {since}")
                    return iter([{"type": "ERROR", "object": expired.status()}])
                backlog = [
                    (t, copy.deepcopy(o))
                    for rv, r, n, t, o in store.history
                    if rv > since and r == res and ns in (None, n) and match(o)
                ]
            else:
                backlog = [("ADDED", o) for o in store.list(res, ns) if match(o)]
            store.watchers.append(w)

        def stream() -> Iterator[dict[str, Any]]:
            deadline = time.monotonic() + timeout
            try:
                for t, o in backlog:
                    yield {"type": t, "object": o}
                while not self.c.stopping.is_set():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    try:
                        item = w.q.get(timeout=min(left, 0.5))
                    except queue.Empty:
                        continue
                    if item is None:
                        return
                    yield {"type": item[0], "object": item[1]}
            finally:
                with store.lock, contextlib.suppress(ValueError):
                    store.watchers.remove(w)

        return stream()

    def namespaces(
        self, method: str, name: str | None, query: dict[str, str], body: Any
    ) -> tuple[int, Any] | Iterator[dict[str, Any]]:
        store = self.c.store
        if name is None:
            if method == "GET":
                return self.listing("namespaces", "", query)
            if method == "POST":
                nm = body["metadata"]["name"]
                if store.get("namespaces", "", nm):
                    raise ApiError(409, "AlreadyExists", f'namespaces "{nm}" already exists')
                obj = self.c.new_meta(copy.deepcopy(body), nm, "")
                obj.setdefault("spec", {"finalizers": ["kubernetes"]})
                obj["status"] = {"phase": "Active"}
                return 201, store.put("namespaces", "", obj, "ADDED")
        elif method == "GET":
            obj = store.get("namespaces", "", name)
            if obj is None:
                raise not_found("namespaces", name)
            return 200, copy.deepcopy(obj)
        elif method == "DELETE":
            obj = store.get("namespaces", "", name)
            if obj is None:
                raise not_found("namespaces", name)
            obj["status"] = {"phase": "Terminating"}
            obj["metadata"]["deletionTimestamp"] = k8s_time(now())
            out = store.put("namespaces", "", obj, "MODIFIED")
            threading.Thread(target=self.finalize_namespace, args=(name,), daemon=True).start()
            return 200, out
        raise ApiError(405, "MethodNotAllowed", f"{method} not allowed on namespaces")

    def finalize_namespace(self, name: str) -> None:
        store = self.c.store
        for res in ("deployments", "statefulsets"):
            for d in store.list(res, name):
                store.remove(res, name, d["metadata"]["name"])
        for p in store.list("pods", name):
            with contextlib.suppress(ApiError):
                self.c.delete_pod(name, p["metadata"]["name"], None)
        deadline = time.monotonic() + 60
        while store.list("pods", name) and time.monotonic() < deadline:
            time.sleep(0.02)
        for res in ("services", "events", *GENERIC):
            for o in store.list(res, name):
                store.remove(res, name, o["metadata"]["name"])
        store.remove("namespaces", "", name)

    def namespaced(
        self, method: str, res: str, ns: str, name: str | None, query: dict[str, str], body: Any
    ) -> tuple[int, Any] | Iterator[dict[str, Any]]:
        store, c = self.c.store, self.c
        if name is None and method == "GET":
            return self.listing(res, ns, query)
        nsobj = c.require_namespace(ns)
        if name is None and method == "POST":
            if nsobj["metadata"].get("deletionTimestamp"):
                raise ApiError(
                    403,
                    "Forbidden",
                    f"{res} is forbidden: unable to create new content in namespace "
                    f"{ns} because it is being terminated",
                )
            nm = body["metadata"]["name"]
            if store.get(res, ns, nm):
                raise ApiError(409, "AlreadyExists", f'{res}{_group(res)} "{nm}" already exists')
            if res not in ("services", "deployments", "statefulsets", "pods", *GENERIC):
                raise ApiError(405, "MethodNotAllowed", f"creating {res} is not served here")
            obj = c.new_meta(copy.deepcopy(body), nm, ns)
            self.defaults(res, obj)
            if res in WORKLOADS:
                obj["metadata"]["generation"] = 1
            out = store.put(res, ns, obj, "ADDED")
            c.wake.set()
            return 201, out
        if name is None:
            raise ApiError(405, "MethodNotAllowed", f"{method} not allowed")
        obj = store.get(res, ns, name)
        if obj is None:
            raise not_found(f"{res}{_group(res)}", name)
        if method == "GET":
            return 200, copy.deepcopy(obj)
        if method == "PUT" and res in GENERIC:
            return 200, self.replace_generic(res, ns, name, obj, body)
        if method == "PUT":
            if res not in WORKLOADS:
                raise ApiError(405, "MethodNotAllowed", f"replacing {res} is not served here")
            new = copy.deepcopy(body)
            if body["metadata"].get("name") != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match")
            new["metadata"] = {
                **obj["metadata"],
                "labels": body["metadata"].get("labels") or {},
                "annotations": body["metadata"].get("annotations") or {},
            }
            self.defaults(res, new)
            if new["spec"] != obj["spec"]:
                new["metadata"]["generation"] = obj["metadata"].get("generation", 1) + 1
            new["status"] = obj.get("status", {})
            out = store.put(res, ns, new, "MODIFIED")
            c.wake.set()
            return 200, out
        if method == "DELETE":
            if res == "pods":
                grace = (body or {}).get("gracePeriodSeconds")
                return 200, c.delete_pod(ns, name, grace)
            store.remove(res, ns, name)
            if res == "services":  # a Service's DELETE answers with the Service
                return 200, copy.deepcopy(obj)
            if res in WORKLOADS:
                for p in c.owned(obj):
                    with contextlib.suppress(ApiError):
                        c.delete_pod(ns, p["metadata"]["name"], None)
            c.wake.set()
            return 200, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "kind": res, "uid": obj["metadata"]["uid"]},
            }
        raise ApiError(405, "MethodNotAllowed", f"{method} not allowed")

    def replace_generic(
        self, res: str, ns: str, name: str, old: dict[str, Any], body: dict[str, Any]
    ) -> dict[str, Any]:
        """PUT: the body replaces the object; a stale resourceVersion is a conflict."""
        meta = body.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match")
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {res}{_group(res)} "{name}": the object has '
                "been modified; please apply your changes to the latest version and try again",
            )
        new = copy.deepcopy(body)
        new["metadata"] = {
            **{k: old["metadata"][k] for k in ("name", "namespace", "uid", "creationTimestamp")},
            "labels": meta.get("labels") or {},
            "annotations": meta.get("annotations") or {},
        }
        self.defaults(res, new)
        return self.c.store.put(res, ns, new, "MODIFIED")

    def defaults(self, res: str, obj: dict[str, Any]) -> None:
        kind, api = KINDS[res]
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", api)
        if res == "secrets":  # stringData is write-only: the API server folds it into data
            obj.setdefault("type", "Opaque")
            for k, v in (obj.pop("stringData", None) or {}).items():
                obj.setdefault("data", {})[k] = base64.b64encode(str(v).encode()).decode()
        if res == "services":
            spec = obj.setdefault("spec", {})
            spec.setdefault("type", "ClusterIP")
            name = obj["metadata"]["name"]
            h = hashlib.sha256(f"{obj['metadata']['namespace']}/{name}".encode()).digest()
            spec.setdefault("clusterIP", f"10.100.{h[0]}.{max(h[1], 2)}")
            spec["clusterIPs"] = [spec["clusterIP"]]
            for pt in spec.get("ports") or []:
                pt.setdefault("protocol", "TCP")
                pt.setdefault("targetPort", pt["port"])
        if res == "deployments":
            spec = obj["spec"]
            spec.setdefault("replicas", 1)
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault("strategy", {"type": "RollingUpdate"})
        if res == "pods":
            spec = obj["spec"]
            spec.setdefault("enableServiceLinks", True)
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort", "conditions": []}
        if res == "statefulsets":
            spec = obj["spec"]
            spec.setdefault("replicas", 1)
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate"})


def _group(res: str) -> str:
    return ".apps" if res in WORKLOADS else f".{RBAC}" if res in ("roles", "rolebindings") else ""


def _true(v: str | None) -> bool:
    return (v or "").lower() in ("true", "1")


def make_handler(api: Api) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, body: Any) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            ctype = "text/plain" if isinstance(body, str) else "application/json"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _do(self) -> None:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.headers.get("Authorization") != f"Bearer {api.token}":
                self._send(401, ApiError(401, "Unauthorized", "Unauthorized").status())
                return
            m = EXEC.match(url.path)
            if m and self.command in ("GET", "POST"):
                try:
                    self._exec(m.group("ns"), m.group("name"), parse_qs(url.query))
                except ApiError as exc:
                    self._send(exc.code, exc.status())
                return
            try:
                body = json.loads(raw) if raw else None
                out = api.handle(self.command, url.path, query, body)
            except ApiError as exc:
                self._send(exc.code, exc.status())
                return
            except (KeyError, TypeError, ValueError) as exc:
                self._send(400, ApiError(400, "BadRequest", f"bad request: {exc}").status())
                return
            if isinstance(out, tuple):
                self._send(*out)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for ev in out:
                    chunk = (json.dumps(ev) + "\n").encode()
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    out.close()  # type: ignore[attr-defined]
            self.close_connection = True

        def _exec(self, ns: str, name: str, query: dict[str, list[str]]) -> None:
            argv = query.get("command") or []
            if not argv:
                raise ApiError(400, "BadRequest", "you must specify at least 1 command")
            if "websocket" not in (self.headers.get("Upgrade") or "").lower():
                raise ApiError(400, "BadRequest", "Upgrade request required")
            target = api.c.exec_target(ns, name, (query.get("container") or [None])[-1])
            proto = kexec.choose_protocol(self.headers.get("Sec-WebSocket-Protocol"))
            if proto is None:
                raise ApiError(400, "BadRequest", "no supported WebSocket subprotocol offered")
            self.send_response(101, "Switching Protocols")
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            key = self.headers.get("Sec-WebSocket-Key") or ""
            self.send_header("Sec-WebSocket-Accept", kexec.accept_key(key))
            self.send_header("Sec-WebSocket-Protocol", proto)
            self.end_headers()
            self.wfile.flush()
            session = kexec.Session(self.rfile, self.wfile, self.connection, proto)
            kexec.run(session, target, argv)
            self.close_connection = True

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _do

    return Handler


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (a watch closed, a test torn down) is not news


class Server:
    def __init__(
        self,
        port: int,
        kubeconfig: Path,
        time_scale: float,
        gpus: int = 1,
        nodes: int = 7,  # inventories/kube-testserver.yaml: one GPU for each engine
        host: str = "127.0.0.1",
    ) -> None:
        # absolute: a container runs with the state directory as its working directory, and the
        # volume paths its command is given must not be relative to that (the README's
        # `python -m tests.kubeapi` passes the relative default)
        state = (kubeconfig.parent / "state").resolve()
        state.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(time_scale, state, gpus, nodes)
        self.token = secrets.token_urlsafe(24)
        self.api = Api(self.cluster, self.token)
        self.httpd = QuietServer((host, port), make_handler(self.api))
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        kubeconfig.write_text(yaml.safe_dump(self.kubeconfig()))
        kubeconfig.chmod(0o600)

    def kubeconfig(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gameday-testserver", "cluster": {"server": self.url}}],
            "users": [{"name": "gameday", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "gameday-testserver",
                    "context": {"cluster": "gameday-testserver", "user": "gameday"},
                }
            ],
            "current-context": "gameday-testserver",
        }

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.1)

    def start(self) -> Server:
        threading.Thread(target=self.serve_forever, name="kubeapi", daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving; kill every container still running."""
        self.cluster.stopping.set()  # no kubelet starts a container from here on
        self.httpd.shutdown()
        self.httpd.server_close()
        runtimes = list(self.cluster.runtimes.values())
        for rt in runtimes:
            rt.deleting.set()
        for rt in runtimes:
            rt.gone.wait(5)
        # every container this server ever started, whichever pod it belonged to
        for cont in list(self.cluster.started):
            if cont.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(cont.proc.pid, signal.SIGKILL)
                cont.proc.wait()
