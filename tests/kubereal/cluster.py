"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler from build.py's cached binaries.

Each process runs in its own session (its own process group) and is stopped through it by the
id it started with; a kernel parent-death signal ends it if the test process dies first. Every
port is a free loopback port outside the kernel's ephemeral range, every TLS endpoint is signed
by a CA made for this run (pki.py), etcd takes only clients with a certificate of that CA, and
the API server only the run's static tokens; the state directory is owner-only.

    with ControlPlane(build.ensure(), tmp_path / "kube") as cp:
        api = kubernetes.config.new_client_from_config(str(cp.kubeconfig))
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import yaml

from tests.kubereal import pki
from tests.kubereal.build import Binaries

SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
_PR_SET_PDEATHSIG = 1


class ControlPlaneError(Exception):
    """A component did not start or become ready; the message carries its log's tail."""


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


# ports this process has handed out: two components of one control plane never get the same
_given: set[int] = set()


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range where there is room for it.

    A port the kernel hands out for port 0 is one it also hands to outgoing connections: the API
    server opens dozens to etcd while a later component waits for its port, and one of them can
    take it first. Ports outside the range are never given to a connection, so only a listener
    chosen the same way can collide, and _wait_healthz picks again where one does. Where the
    range leaves too little room (a host that widened it), the kernel's choice is taken."""
    low, high = _ephemeral_range()
    gaps = [(lo, hi) for lo, hi in ((20000, low - 1), (high + 1, 65535)) if hi - lo >= 1000]
    for _ in range(200):
        if gaps:
            lo, hi = random.choice(gaps)
            port = random.randint(lo, hi)
        else:
            port = 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        if port not in _given:
            _given.add(port)
            return port
    raise ControlPlaneError(f"no free loopback port outside {low}-{high}")


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    # runs in the child between fork and exec (libc resolved before, in the parent): SIGKILL
    # when the process that started it exits
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class ControlPlane:
    binaries: Binaries
    dir: Path
    ready_timeout: float = 120.0
    procs: list[Proc] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        keys = pki.write(self.dir / "pki")
        self.pki = keys
        etcd_port, peer_port = free_port(), free_port()
        self.port = free_port()
        etcd_url = f"https://127.0.0.1:{etcd_port}"
        peer_url = f"https://127.0.0.1:{peer_port}"
        tls = [f"--cert-file={keys.cert}", f"--key-file={keys.key}"]
        self._spawn(
            "etcd",
            [
                str(self.binaries.path("etcd")),
                "--name=default",
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--client-cert-auth",
                f"--trusted-ca-file={keys.ca}",
                *tls,
                "--peer-client-cert-auth",
                f"--peer-trusted-ca-file={keys.ca}",
                f"--peer-cert-file={keys.cert}",
                f"--peer-key-file={keys.key}",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.path("kube-apiserver")),
                f"--etcd-servers={etcd_url}",
                f"--etcd-cafile={keys.ca}",
                f"--etcd-certfile={keys.cert}",
                f"--etcd-keyfile={keys.key}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                "--insecure-port=0",
                f"--cert-dir={self.dir / 'apiserver'}",
                f"--tls-cert-file={keys.cert}",
                f"--tls-private-key-file={keys.key}",
                f"--client-ca-file={keys.ca}",
                f"--token-auth-file={keys.token_file}",
                "--anonymous-auth=false",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={keys.sa_pub}",
                f"--service-account-signing-key-file={keys.sa_key}",
                f"--service-account-issuer={ISSUER}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # the `kubernetes` Service's endpoint would be a loopback address, which
                # Endpoints validation refuses: the reconciler would log that forever
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                # the API server reaches a kubelet (logs, exec) at its Node's InternalIP and
                # daemonEndpoints port, checks its serving certificate against the run's CA and
                # presents its own as the client certificate the kubelet asks for
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={keys.ca}",
                f"--kubelet-client-certificate={keys.cert}",
                f"--kubelet-client-key={keys.key}",
                "--profiling=false",
            ],
        )
        self._write_kubeconfigs()
        self._wait_https("kube-apiserver", f"{self.url}/readyz", self._ca_context(), auth=True)
        common = [
            "--bind-address=127.0.0.1",
            "--port=0",
            "--leader-elect=false",
            "--profiling=false",
        ]
        kcm = self._component_argv(
            "kube-controller-manager",
            "kcm",
            f"--service-account-private-key-file={keys.sa_key}",
            f"--root-ca-file={keys.ca}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *common,
        )
        sched = self._component_argv("kube-scheduler", "scheduler", *common)
        # both start before either is waited for; each is given a port as it is spawned
        ports = {
            "kube-controller-manager": self._spawn_on_port("kube-controller-manager", kcm),
            "kube-scheduler": self._spawn_on_port("kube-scheduler", sched),
        }
        for name, argv in (("kube-controller-manager", kcm), ("kube-scheduler", sched)):
            self._wait_healthz(name, argv, ports[name])

    def _component_argv(self, name: str, cert_dir: str, *flags: str) -> list[str]:
        """A controller's command: its executable, its user's kubeconfig for the API server and
        for checking callers, its serving certificate's directory, then `flags`."""
        kubeconfig = self._kubeconfig(f"system:{name}")
        return [
            str(self.binaries.path(name)),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--cert-dir={self.dir / cert_dir}",
            *flags,
        ]

    def _spawn_on_port(self, name: str, argv: list[str], attempt: int = 0) -> int:
        port = free_port()
        # each attempt logs to a file of its own: a retry reads only what its own process said
        log = f"{name}.log" if attempt == 0 else f"{name}.{attempt}.log"
        self._spawn(name, [*argv, f"--secure-port={port}"], log)
        return port

    def _wait_healthz(self, name: str, argv: list[str], port: int, tries: int = 3) -> None:
        """Wait for a component's /healthz; spawn it again on another port where it exited
        because its port was taken.

        Their serving certificates are self-signed into --cert-dir; /healthz is all we ask."""
        insecure = ssl._create_unverified_context()
        for attempt in range(1, tries + 1):
            try:
                self._wait_https(name, f"https://127.0.0.1:{port}/healthz", insecure)
                return
            except ControlPlaneError as e:
                proc = next(p for p in self.procs if p.name == name)
                exited = proc.popen.poll() is not None
                if not exited or "address already in use" not in str(e) or attempt == tries:
                    raise
            # the exited attempt is reaped and forgotten; only a live one is stopped by stop()
            self.procs = [p for p in self.procs if p.name != name]
            port = self._spawn_on_port(name, argv, attempt)

    def stop(self, grace: float = 10.0) -> None:
        """Stop every component, latest first, through its process group; SIGKILL after grace.

        A leader is reaped only after its group is gone: until then its id stays reserved, so
        the group signalled is never another program's."""
        for p in reversed(self.procs):
            if p.popen.returncode is None:
                _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in reversed(self.procs):
            if p.popen.returncode is None:
                while not _exited(p.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                _signal_group(p.pid, signal.SIGKILL)
                p.popen.wait()
        self.procs.clear()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _spawn(self, name: str, argv: list[str], log_name: str | None = None) -> None:
        log = self.dir / (log_name or f"{name}.log")
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env={"PATH": "/usr/bin:/bin", "HOME": str(self.dir)},
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.procs.append(Proc(name, popen, log))

    def _kubeconfig(self, user: str) -> Path:
        return self.dir / f"kubeconfig-{user.replace(':', '-')}"

    def _write_kubeconfigs(self) -> None:
        for user, token in self.pki.tokens.items():
            doc = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "gameday",
                        "cluster": {
                            "server": self.url,
                            "certificate-authority": str(self.pki.ca),
                        },
                    }
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "gameday", "context": {"cluster": "gameday", "user": user}}],
                "current-context": "gameday",
            }
            path = self.kubeconfig if user == "admin" else self._kubeconfig(user)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                yaml.safe_dump(doc, f)

    def _ca_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.pki.ca))

    def _wait_https(self, name: str, url: str, ctx: ssl.SSLContext, auth: bool = False) -> None:
        proc = next(p for p in self.procs if p.name == name)
        headers = {"Authorization": f"Bearer {self.pki.tokens['admin']}"} if auth else {}
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited {proc.popen.returncode}:\n{_tail(proc.log)}"
                )
            try:
                req = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:
                last = str(e)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{name}: {url} not ready in {self.ready_timeout}s ({last}):\n{_tail(proc.log)}"
        )

    def describe(self) -> dict[str, object]:
        return {"url": self.url, "kubeconfig": str(self.kubeconfig), "pids": self.pids()}

    def __str__(self) -> str:
        return json.dumps(self.describe())


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (WNOWAIT)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
