"""Commands run inside a lab pod's container through the API server's exec subresource, as
`kubectl exec` does: the official client's stream API (a WebSocket, the channel protocol), never
a shell on this machine. The argv is gameday's own (a constant program and a value from a closed
set), never a scenario's text.

`kubernetes.stream.stream` swaps the request method of the API client it is given while it
runs, so each exec gets an ApiClient of its own: the lab's client is shared with its pod watch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from runner.errors import LabError
from runner.labs.base import GpuProcess
from runner.labs.kubernetes.api import KubeApi

EXEC_TIMEOUT_S = 30.0  # a command here is a signal or a listing: seconds, never minutes
MAX_OUTPUT = 256 * 1024  # what is kept of each stream


@dataclass(frozen=True)
class ExecResult:
    rc: int
    stdout: str
    stderr: str


def exec_in(
    kube: KubeApi,
    pod: str,
    argv: Sequence[str],
    *,
    container: str | None = None,
    timeout_s: float = EXEC_TIMEOUT_S,
) -> ExecResult:
    """Run `argv` in the pod's container; its exit code and output. LabError when the API
    server refuses the exec (no such pod, the container not running) or it outlasts
    `timeout_s`."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream import stream
    from websocket import WebSocketException

    api = client.CoreV1Api(client.ApiClient(kube.client.configuration))
    where = f"exec {' '.join(argv[:2])} in pod {pod}"
    try:
        resp = stream(
            api.connect_get_namespaced_pod_exec,
            pod,
            kube.ns,
            command=list(argv),
            container=container,
            stdout=True,
            stderr=True,
            stdin=False,
            tty=False,
            _preload_content=False,
            _request_timeout=kube.spec.request_timeout_s,
        )
    except ApiException as exc:
        raise LabError(
            f"Kubernetes API: {where} refused: {exc.status} {exc.reason}: "
            f"{str(exc.body or '')[:300]}",
            hint=f"kubectl -n {kube.ns} get pod {pod}",
        ) from None
    except (WebSocketException, OSError) as exc:
        raise LabError(f"Kubernetes API: {where} failed: {exc}") from None
    out: list[str] = []
    err: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while resp.is_open():
            left = deadline - time.monotonic()
            if left <= 0:
                raise LabError(
                    f"{where} did not finish within {timeout_s:g} s",
                    hint=f"kubectl -n {kube.ns} exec {pod} -- {' '.join(argv)}",
                )
            resp.update(timeout=min(left, 1.0))
            if resp.peek_stdout():
                out.append(resp.read_stdout())
            if resp.peek_stderr():
                err.append(resp.read_stderr())
        out.append(resp.read_stdout())
        err.append(resp.read_stderr())
        rc = resp.returncode
    except (WebSocketException, OSError) as exc:
        raise LabError(f"Kubernetes API: {where} failed: {exc}") from None
    finally:
        resp.close()
    if rc is None:
        raise LabError(f"{where}: the API server sent no exit status")
    return ExecResult(
        rc=int(rc), stdout="".join(out)[-MAX_OUTPUT:], stderr="".join(err)[-MAX_OUTPUT:]
    )


SIGNAL_PID1 = 'import os, signal, sys; os.kill(1, signal.Signals["SIG" + sys.argv[1]])'

# Signals the children of the container's PID 1 (the engine's API-server process): its engine
# core. The vLLM image has python3 but not necessarily procps, so no pkill.
SIGNAL_CHILDREN = """\
import os, signal, sys
sig = signal.Signals["SIG" + sys.argv[1]]
sent = []
for d in os.listdir("/proc"):
    if not d.isdigit() or d == str(os.getpid()):
        continue
    try:
        with open("/proc/%s/stat" % d) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        continue
    if ppid == 1:
        try:
            os.kill(int(d), sig)
            sent.append(d)
        except ProcessLookupError:
            pass
print(" ".join(sent))
sys.exit(0 if sent else 3)
"""


NVIDIA_SMI_QUERY = (
    "nvidia-smi",
    "--query-compute-apps=pid,process_name,used_memory",
    "--format=csv,noheader,nounits",
)


def nvidia_smi_processes(csv: str) -> list[GpuProcess]:
    """The rows of NVIDIA_SMI_QUERY's output (`1234, /usr/bin/python3, 1417`)."""
    out = []
    for line in csv.splitlines():
        parts = [p.strip() for p in line.rsplit(",", 1)]
        head = parts[0].split(",", 1) if len(parts) == 2 else []
        if len(head) != 2 or not head[0].strip().isdigit() or not parts[1].isdigit():
            if line.strip():
                raise LabError(f"nvidia-smi gave a row that is not pid, name, MiB: {line[:120]!r}")
            continue
        out.append(GpuProcess(pid=int(head[0]), name=head[1].strip(), mib=int(parts[1])))
    return out
