"""The kubelet of the test cluster: a client of the real API server (cluster.py) that runs the
pods bound to its nodes as local processes, with the container runtime the stand-in uses
(tests/kubeapi/runtime.py).

- It registers `nodes` GPU Nodes (`gameday-testserver-gpu-N`, `nvidia.com/gpu` capacity as a
  string quantity, the GPU labels and taint) and `cpu_nodes` untainted ones without GPUs (the
  system node group, where Prometheus and Alertmanager are scheduled: the real scheduler keeps
  every pod that does not tolerate the GPU taint off the GPU nodes) at 127.0.89.N, reports them
  Ready and renews their Leases in `kube-node-lease`, so the node lifecycle controller neither
  taints nor evicts them.
- It watches the pods bound to each node (`fieldSelector=spec.nodeName=N`) and runs each one
  through NodeRuntime: Service-link variables from the namespace's Services, status written to
  `pods/{name}/status` (podIP, conditions, containerStatuses with restartCount, lastState and
  CrashLoopBackOff), Events posted (a repeat counts up the same Event), and a deleted pod's
  containers stopped within its grace period before the pod is deleted with
  `gracePeriodSeconds=0`, as the kubelet finishes a graceful deletion.
- Each node serves the kubelet API the API server calls for `kubectl logs` and `exec`
  (`/containerLogs/{ns}/{pod}/{container}` with `previous`, `timestamps` and `tailLines`;
  `/exec/{ns}/{pod}/{container}`, the WebSocket channel protocol the API server proxies) over
  HTTPS on the Node's address and `daemonEndpoints` port, with a serving certificate of the run's
  CA, and takes only clients with a certificate of that CA (the API server's
  `--kubelet-client-certificate`).
- The Prometheus of the lab is Debian's, built without Kubernetes discovery: its pod discovery is
  pointed at this kubelet's HTTP discovery endpoint (plain HTTP on 127.0.0.1), which lists the
  namespace's pods from the API server with the bearer token Prometheus presents; an Alertmanager
  it names by a Service's DNS name is reached through the Service's pods (tests/support/kube_sd).

Services keep the ClusterIPs the real allocator gives them (10.0.0.0/24): they appear in the
Service-link variables and in the objects, but no traffic goes to them. Nothing of the lab needs
it: gameday reaches each pod at its pod IP, as on the stand-in, and the one Service a pod calls
(the Alertmanager's) is resolved to its pods as above. A process on this machine cannot reach a
10.0.0.x address without a route and a proxy, which would need root.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

import httpx

from tests.kubeapi import exec as kexec
from tests.kubeapi import httpsd
from tests.kubeapi.runtime import (
    GPU_RESOURCE,
    ApiError,
    NodeRuntime,
    PodRuntime,
    event_object,
    k8s_time,
    now,
)
from tests.kubereal.pki import KUBELET_ADDRESSES, Pki
from tests.support import kube_sd

NODE_PREFIX = "gameday-testserver-gpu-"  # g5.xlarge-like nodes, one GPU each
CPU_NODE_PREFIX = "gameday-testserver-cpu-"  # the system node group: no GPU, no taint
NODE_LABELS = {"nvidia.com/gpu.present": "true", "node.kubernetes.io/instance-type": "g5.xlarge"}
NODE_TAINTS = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
# a g5.xlarge's (the engine's pod asks 2 CPUs, 12 GiB and 20 GiB of ephemeral storage)
CAPACITY = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "250Gi", "pods": "110"}
LEASE_S = 40  # the node lifecycle controller's grace period; renewed every quarter of it
WATCH_S = 300
LOGS = re.compile(r"^/containerLogs/(?P<ns>[^/]+)/(?P<pod>[^/]+)/(?P<container>[^/]+)$")
EXEC = re.compile(r"^/exec/(?P<ns>[^/]+)/(?P<pod>[^/]+)/(?P<container>[^/]+)$")


class Kubelet(NodeRuntime):
    """The kubelet of `nodes` nodes, a client of the API server at `url` (see the module's
    docstring). `start()` registers the nodes and begins; `stop()` kills every container it
    started and deletes its Nodes.

        with Kubelet(cp.url, cp.pki, cp.pki.tokens["system:node:kubelet"], state, 100):
            ...
    """

    def __init__(
        self,
        url: str,
        pki: Pki,
        token: str,
        state_dir: Path,
        time_scale: float,
        gpus: int = 1,
        nodes: int = 7,  # inventories/kube-testserver.yaml: one GPU for each engine
        cpu_nodes: int = 1,
    ) -> None:
        super().__init__(time_scale, state_dir.resolve(), gpus)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.pki = pki
        self.token = token
        self.gpu_nodes = [f"{NODE_PREFIX}{i + 1}" for i in range(nodes)]
        self.nodes = [*self.gpu_nodes, *(f"{CPU_NODE_PREFIX}{i + 1}" for i in range(cpu_nodes))]
        self.api = self._client(timeout=30)
        self.locks: dict[str, threading.Lock] = {}  # pod uid -> its status writes, one at a time
        self.events: dict[tuple[str, str, str], tuple[str, int]] = {}  # -> (Event name, count)
        self.events_lock = threading.Lock()
        self.servers: list[_Server] = []
        self.port = 0
        self.sd_url = ""

    def __enter__(self) -> Kubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _client(self, timeout: float | None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            verify=ssl.create_default_context(cafile=str(self.pki.ca)),
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=httpx.Timeout(30, read=timeout),
            trust_env=False,  # the API server is on loopback: never through a proxy of the env
        )

    # ---- the API ----------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.api.request(method, path, json=body, **kw)

    def get(self, path: str) -> dict[str, Any] | None:
        r = self.call("GET", path)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out

    # ---- start and stop -----------------------------------------------------------------------

    def start(self) -> Kubelet:
        self._serve()
        for i, node in enumerate(self.nodes):
            self._register(node, KUBELET_ADDRESSES[i])
            self._renew_lease(node)
        threading.Thread(target=self._heartbeat, name="kubelet-heartbeat", daemon=True).start()
        for node in self.nodes:
            threading.Thread(
                target=self._watch, args=(node,), name=f"kubelet-{node}", daemon=True
            ).start()
        return self

    def stop(self) -> None:
        """Kill every container, stop serving, and take the Nodes out of the cluster (the pod
        garbage collector deletes what was bound to them)."""
        self.stop_containers()
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
        for node in self.nodes:
            with contextlib.suppress(httpx.HTTPError):
                self.call("DELETE", f"/api/v1/nodes/{node}")
        self.api.close()

    def _serve(self) -> None:
        """The kubelet API on every node's address (one port for all), and HTTP discovery."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.pki.ca))
        ctx.load_cert_chain(str(self.pki.kubelet_cert), str(self.pki.kubelet_key))
        ctx.verify_mode = ssl.CERT_REQUIRED
        port = 0
        for i in range(len(self.nodes)):
            srv = _Server((KUBELET_ADDRESSES[i], port), _kubelet_handler(self))
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
            port = srv.server_address[1]
            self.servers.append(srv)
        self.port = port
        sd = _Server(("127.0.0.1", 0), _sd_handler(self))
        self.servers.append(sd)
        self.sd_url = f"http://127.0.0.1:{sd.server_address[1]}"
        for server in self.servers:
            threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()

    # ---- the nodes ----------------------------------------------------------------------------

    def _register(self, node: str, address: str) -> None:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {
                    "kubernetes.io/hostname": node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    **(NODE_LABELS if node in self.gpu_nodes else {}),
                },
            },
            "spec": {"taints": NODE_TAINTS if node in self.gpu_nodes else []},
        }
        r = self.call("POST", "/api/v1/nodes", body)
        if r.status_code == 409:  # a kubelet before this one registered it: take it over
            old = self.get(f"/api/v1/nodes/{node}") or {}
            body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            r = self.call("PUT", f"/api/v1/nodes/{node}", body)
        r.raise_for_status()
        self._node_status(node, address)

    def _node_status(self, node: str, address: str | None = None) -> None:
        t = k8s_time(now())
        gpus = self.node_gpus(node)
        capacity = {**CAPACITY, GPU_RESOURCE: str(gpus)}
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHas{reason}",
                "message": f"kubelet has {reason.lower()}",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }
            for kind, reason in (
                ("MemoryPressure", "SufficientMemory"),
                ("DiskPressure", "NoDiskPressure"),
                ("PIDPressure", "SufficientPID"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": t,
                "lastTransitionTime": t,
            }
        )
        status: dict[str, Any] = {"capacity": capacity, "allocatable": capacity}
        status["conditions"] = conditions
        if address is not None:
            status["addresses"] = [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": node},
            ]
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.port}}
            status["nodeInfo"] = {
                "machineID": secrets.token_hex(16),
                "systemUUID": secrets.token_hex(16),
                "bootID": secrets.token_hex(16),
                "kernelVersion": "",
                "osImage": "gameday test kubelet",
                "containerRuntimeVersion": "gameday://1",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            }
        r = self.call(
            "PATCH",
            f"/api/v1/nodes/{node}/status",
            {"status": status},
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        r.raise_for_status()

    def _renew_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        spec = {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_S,
            "renewTime": now().strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        r = self.call(
            "PATCH", path, {"spec": spec}, headers={"Content-Type": "application/merge-patch+json"}
        )
        if r.status_code == 404:
            body = {"metadata": {"name": node, "namespace": "kube-node-lease"}, "spec": spec}
            r = self.call("POST", path.rsplit("/", 1)[0], body)
        r.raise_for_status()

    def _heartbeat(self) -> None:
        while not self.stopping.wait(LEASE_S / 4):
            for node in self.nodes:
                with contextlib.suppress(httpx.HTTPError):
                    self._renew_lease(node)
                    self._node_status(node)

    # ---- the pods bound to a node ---------------------------------------------------------------

    def _watch(self, node: str) -> None:
        """List and watch the node's pods until stopped; a watch that ends or expires is
        resumed, or begun anew from a list."""
        sel = quote(f"spec.nodeName={node}")
        rv = ""
        with self._client(timeout=WATCH_S + 30) as http:
            while not self.stopping.is_set():
                try:
                    if not rv:
                        r = http.get(f"/api/v1/pods?fieldSelector={sel}")
                        r.raise_for_status()
                        listed = r.json()
                        for p in listed["items"]:
                            self._pod_event("ADDED", p, node)
                        rv = listed["metadata"]["resourceVersion"]
                    url = (
                        f"/api/v1/pods?fieldSelector={sel}&watch=true&resourceVersion={rv}"
                        f"&timeoutSeconds={WATCH_S}"
                    )
                    with http.stream("GET", url) as resp:
                        resp.raise_for_status()
                        for line in resp.iter_lines():
                            if self.stopping.is_set():
                                return
                            if not line:
                                continue
                            ev = json.loads(line)
                            if ev["type"] == "ERROR":  # 410 Gone: too old, list again
                                rv = ""
                                break
                            rv = ev["object"]["metadata"]["resourceVersion"]
                            self._pod_event(ev["type"], ev["object"], node)
                except (httpx.HTTPError, ValueError, KeyError):
                    rv = ""
                    self.stopping.wait(0.5)

    def _pod_event(self, type_: str, p: dict[str, Any], node: str) -> None:
        meta = p["metadata"]
        uid = meta["uid"]
        rt = self.runtimes.get(uid)
        if type_ == "DELETED" or meta.get("deletionTimestamp"):
            if rt is not None:
                rt.deleting.set()
            elif type_ != "DELETED":
                self._delete(meta["namespace"], meta["name"], uid)  # nothing of it runs here
            return
        if rt is not None or self.stopping.is_set():
            return
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return  # finished under a kubelet before this one
        rt = PodRuntime(meta["namespace"], meta["name"], uid, self.pod_ip(p))
        rt.node = node
        self.runtimes[uid] = rt
        self.locks[uid] = threading.Lock()
        threading.Thread(target=self.run_pod, args=(rt,), daemon=True).start()

    def _delete(self, ns: str, name: str, uid: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            self.call(
                "DELETE",
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid},
                },
            )

    # ---- NodeRuntime's hooks: the pod's object in the API ---------------------------------------

    def pod(self, rt: PodRuntime) -> dict[str, Any] | None:
        try:
            p = self.get(f"/api/v1/namespaces/{rt.ns}/pods/{rt.name}")
        except httpx.HTTPError:
            return None
        if p is None or p["metadata"]["uid"] != rt.uid:
            return None
        return p

    def update_status(self, rt: PodRuntime, fn: Callable[..., None], *args: Any) -> None:
        """GET, change, PUT `pods/{name}/status`; a conflict (another writer came first) is
        tried again on the newer object."""
        lock = self.locks.get(rt.uid) or threading.Lock()
        with lock:
            for _ in range(20):
                p = self.pod(rt)
                if p is None:
                    return
                fn(p, *args)
                path = f"/api/v1/namespaces/{rt.ns}/pods/{rt.name}/status"
                try:
                    r = self.call("PUT", path, p)
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if r.status_code != 409:
                    return
                time.sleep(0.01)

    def event(
        self, pod: dict[str, Any], type_: str, reason: str, message: str, source: str
    ) -> None:
        meta = pod["metadata"]
        ns = meta["namespace"]
        t = k8s_time(now())
        key = (meta["uid"], reason, message)
        with self.events_lock:
            seen = self.events.get(key)
            if seen is not None:
                name, count = seen[0], seen[1] + 1
                self.events[key] = (name, count)
                patch = {"count": count, "lastTimestamp": t}
                with contextlib.suppress(httpx.HTTPError):
                    self.call(
                        "PATCH",
                        f"/api/v1/namespaces/{ns}/events/{name}",
                        patch,
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
                return
            name = f"{meta['name']}.{secrets.token_hex(8)}"
            self.events[key] = (name, 1)
        body = event_object(pod, type_, reason, message, source, name, t)
        with contextlib.suppress(httpx.HTTPError):
            self.call("POST", f"/api/v1/namespaces/{ns}/events", body)

    def services(self, ns: str) -> list[dict[str, Any]]:
        out = self.get(f"/api/v1/namespaces/{ns}/services")
        return list((out or {}).get("items") or [])

    def lookup(self, ns: str, res: str, name: str) -> dict[str, Any] | None:
        return self.get(f"/api/v1/namespaces/{ns}/{res}/{name}")

    def node_gpus(self, node: str) -> int:
        return self.gpus if node in self.gpu_nodes else 0

    def host_ip(self, node: str) -> str:
        return KUBELET_ADDRESSES[self.nodes.index(node)]

    def prepare_volumes(self, rt: PodRuntime, c: dict[str, Any]) -> None:
        if str(c["image"]).startswith("prom/prometheus:"):
            services = self.services(rt.ns)
            for d in rt.volumes.values():
                kube_sd.rewrite_config(d, services, base=self.sd_url)

    def finish(self, rt: PodRuntime) -> None:
        self.locks.pop(rt.uid, None)
        if not self.stopping.is_set():  # a kubelet that stops leaves its pods to the cluster
            self._delete(rt.ns, rt.name, rt.uid)

    # ---- the kubelet API ----------------------------------------------------------------------

    def find(self, ns: str, name: str) -> dict[str, Any]:
        p = self.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        if p is None or p["metadata"]["uid"] not in self.runtimes:
            raise ApiError(404, "NotFound", f'pod "{name}" not found')
        return p


def _query(path: str) -> tuple[str, dict[str, list[str]]]:
    url = urlparse(path)
    return url.path, parse_qs(url.query)


def _true(q: dict[str, list[str]], key: str) -> bool:
    return (q.get(key) or ["false"])[-1].lower() in ("true", "1")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (an exec closed, a test torn down) is not news


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_text(self, code: int, text: str, ctype: str = "text/plain") -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _kubelet_handler(kubelet: Kubelet) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        def _do(self) -> None:
            path, q = _query(self.path)
            try:
                if (m := LOGS.match(path)) and self.command == "GET":
                    p = kubelet.find(m["ns"], m["pod"])
                    self._check_container(p, m["container"])
                    tail = (q.get("tailLines") or [""])[-1]
                    text = kubelet.logs(
                        p, _true(q, "previous"), _true(q, "timestamps"), int(tail) if tail else None
                    )
                    self.send_text(200, text)
                elif (m := EXEC.match(path)) and self.command in ("GET", "POST"):
                    argv = q.get("command") or []
                    if not argv:
                        raise ApiError(400, "BadRequest", "you must specify at least 1 command")
                    p = kubelet.find(m["ns"], m["pod"])
                    target = kubelet.exec_target(p, m["container"])
                    kexec.serve(self, target, argv)
                    self.close_connection = True
                else:
                    self.send_text(404, "404 page not found")
            except ApiError as exc:
                # the kubelet answers with the error's text; the API server makes it a Status
                self.send_text(exc.code, exc.message)

        def _check_container(self, p: dict[str, Any], name: str) -> None:
            if name not in [c["name"] for c in p["spec"]["containers"]]:
                pod = p["metadata"]["name"]
                raise ApiError(400, "BadRequest", f"container {name} is not valid for pod {pod}")

        do_GET = do_POST = _do

    return Handler


def _sd_handler(kubelet: Kubelet) -> type[BaseHTTPRequestHandler]:
    """HTTP discovery of a namespace's pods (httpsd.py's target groups), asked of the API server
    as the caller: its bearer token decides what it may see."""

    class Handler(_Handler):
        def do_GET(self) -> None:
            m = httpsd.PATH.match(urlparse(self.path).path)
            if not m:
                self.send_text(404, "404 page not found")
                return
            auth = self.headers.get("Authorization") or ""
            with contextlib.suppress(httpx.HTTPError):
                r = kubelet.api.get(
                    f"/api/v1/namespaces/{m['ns']}/pods", headers={"Authorization": auth}
                )
                if r.status_code != 200:
                    self.send_text(r.status_code, r.text, "application/json")
                    return
                groups = httpsd.target_groups(r.json()["items"])
                self.send_text(200, json.dumps(groups), "application/json")
                return
            self.send_text(502, "the API server did not answer")

    return Handler
