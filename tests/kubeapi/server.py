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
import queue
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from tests.kubeapi import exec as kexec
from tests.kubeapi import httpsd
from tests.kubeapi.runtime import (
    GPU_RESOURCE,
    ApiError,
    NodeRuntime,
    PodRuntime,
    event_object,
    gpu_request,
    k8s_time,
    not_found,
    now,
    pod_ready,
)
from tests.support import kube_sd

NODE_PREFIX = "gameday-testserver-gpu-"  # g5.xlarge-like nodes, one GPU each
NODE_LABELS = {"nvidia.com/gpu.present": "true", "node.kubernetes.io/instance-type": "g5.xlarge"}
NODE_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
HISTORY = 20000


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


class Cluster(NodeRuntime):
    """The store, the controllers, the scheduler, and the kubelet of every node (NodeRuntime
    reading and writing pods in the store)."""

    def __init__(self, time_scale: float, state_dir: Path, gpus: int, nodes: int = 1) -> None:
        super().__init__(time_scale, state_dir, gpus)
        self.nodes = [f"{NODE_PREFIX}{i + 1}" for i in range(nodes)]
        self.store = Store()
        self.wake = threading.Event()
        self.bound: set[str] = set()  # uids of the pods a kubelet has taken
        self.ensure_default_namespace()
        threading.Thread(target=self.controllers, name="controllers", daemon=True).start()

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
            e = event_object(
                pod, type_, reason, message, source, f"{meta['name']}.{secrets.token_hex(8)}", t
            )
            e["metadata"] |= {"uid": str(uuid.uuid4()), "creationTimestamp": t}
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
        ready = sum(1 for p in live if pod_ready(p))
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
            elif pod_ready(pod):
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
            gpu_request(p)
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
        threading.Thread(target=self.run_pod, args=(rt,), daemon=True).start()

    def unschedulable(self, p: dict[str, Any]) -> tuple[str | None, str]:
        """(why not, "") or (None, the node)."""
        n = len(self.nodes)
        sel = p["spec"].get("nodeSelector") or {}
        matching = [
            node
            for node in self.nodes
            if all(
                (NODE_LABELS | {"kubernetes.io/hostname": node}).get(k) == v for k, v in sel.items()
            )
        ]
        if not matching:
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
        if not tolerated and gpu_request(p):
            return (
                f"0/{n} nodes are available: {n} node(s) had untolerated taint "
                "{nvidia.com/gpu: true}."
            ), ""
        for node in matching:
            if self.gpus_in_use(node) + gpu_request(p) <= self.gpus:
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

    def services(self, ns: str) -> list[dict[str, Any]]:
        return self.store.list("services", ns)

    def lookup(self, ns: str, res: str, name: str) -> dict[str, Any] | None:
        return self.store.get(res, ns, name)

    def host_ip(self, node: str) -> str:
        return f"127.0.89.{self.nodes.index(node) + 1}"

    def prepare_volumes(self, rt: PodRuntime, c: dict[str, Any]) -> None:
        if str(c["image"]).startswith("prom/prometheus:"):
            # the system's Prometheus (Debian's) is built without Kubernetes discovery: its pod
            # discovery asks this server's HTTP service discovery instead (httpsd.py)
            # and it has no cluster DNS: an Alertmanager named by its Service's DNS name is
            # reached through the Service's pods
            services = self.store.list("services", rt.ns)
            for d in rt.volumes.values():
                kube_sd.rewrite_config(d, services)

    def finish(self, rt: PodRuntime) -> None:
        self.store.remove("pods", rt.ns, rt.name)
        self.wake.set()


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
                tail = query.get("tailLines")
                text = self.c.logs(
                    self.pod(ns, name),
                    _true(query.get("previous")),
                    _true(query.get("timestamps")),
                    int(tail) if tail else None,
                )
                return 200, text
            return self.namespaced(method, res, ns, name, query, body)
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({path})"
        )

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        p = self.c.store.get("pods", ns, name)
        if p is None:
            raise not_found("pods", name)
        return p

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
            target = api.c.exec_target(api.pod(ns, name), (query.get("container") or [None])[-1])
            kexec.serve(self, target, argv)
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
        self.cluster.stop_containers()
