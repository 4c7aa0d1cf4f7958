"""`pods/{name}/exec` for the stand-in: the Kubernetes remote-command protocol over a WebSocket.

The official client (kubernetes.stream) upgrades `GET|POST .../pods/{name}/exec?command=..` to a
WebSocket and offers `v5.channel.k8s.io,v4.channel.k8s.io`; this server speaks
`v4.channel.k8s.io` (chosen when offered) and `channel.k8s.io`. Every frame is binary, its first
byte the channel: 1 stdout, 2 stderr, 3 the error channel. On exit the v4 protocol sends a
`Status` on channel 3 (`Success`, or `Failure` with reason `NonZeroExitCode` and the exit code as
the `ExitCode` cause), the old one the error text only; then a close frame.

The command runs inside the container's namespaces (`nsenter --target <its PID 1> --pid --mount
--uts`) with the container's environment and working directory, so `ps`, `pkill --parent 1` and
the lab engine's GPU list see what they would in the pod. A program not found answers as runc's
exec does under containerd: the OCI message on stderr and exit code 126.

The framing (RFC 6455) is written here because http.server has no WebSocket support and the
stand-in stays one stdlib server, one thread per connection.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import IO, Any, Protocol

from runner.programs import command_argv
from tests.kubeapi.runtime import ApiError

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
V4 = "v4.channel.k8s.io"
V1 = "channel.k8s.io"
STDOUT, STDERR, ERROR = 1, 2, 3
OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x2, 0x8, 0x9, 0xA
ENTER_TIMEOUT_S = 10.0  # a pod reported running whose init has not exec'd its command yet
NOT_FOUND_EXIT = 126  # runc's exec of a program it cannot find, as containerd reports it


class Target(Protocol):
    """What exec needs of a running container."""

    env: dict[str, str]
    cwd: str

    def init_pid(self) -> int | None: ...

    def entered(self, pid: int) -> bool: ...


def choose_protocol(offered: str | None) -> str | None:
    """The subprotocol to answer with; None when the client offers none this server speaks."""
    names = [p.strip() for p in (offered or "").split(",") if p.strip()]
    if not names:
        return V1  # a client that names none gets the original protocol, as the API server does
    for want in (V4, V1):
        if want in names:
            return want
    return None


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """A server frame: final, unmasked."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def read_frame(rfile: IO[bytes]) -> tuple[int, bytes] | None:
    """One client frame (masked, as RFC 6455 requires of clients); None at end of stream."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode, n = head[0] & 0x0F, head[1] & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", rfile.read(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", rfile.read(8))
    mask = rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = rfile.read(n)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def exit_status(argv: list[str], code: int) -> dict[str, Any]:
    """The v4 error channel's Status for an exit code (kubelet's remotecommand/websocket.go)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            f"command terminated with non-zero exit code: error executing command "
            f"[{' '.join(argv)}], exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class Session:
    """One exec: the upgraded connection and the process behind it."""

    def __init__(self, rfile: IO[bytes], wfile: IO[bytes], sock: socket.socket, proto: str):
        self.rfile, self.wfile, self.sock, self.proto = rfile, wfile, sock, proto
        self.lock = threading.Lock()
        self.closed_by_client = threading.Event()
        self.close_sent = False

    def send(self, opcode: int, payload: bytes) -> None:
        with self.lock, contextlib.suppress(OSError, ValueError):
            if self.close_sent:
                return  # nothing follows a close frame
            self.close_sent = opcode == OP_CLOSE
            self.wfile.write(frame(opcode, payload))
            self.wfile.flush()

    def channel(self, ch: int, data: bytes) -> None:
        self.send(OP_BINARY, bytes([ch]) + data)

    def pump(self, pipe: IO[bytes], ch: int) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):  # type: ignore[attr-defined]
            self.channel(ch, chunk)

    def listen(self, proc: subprocess.Popen[bytes] | None) -> None:
        """Read the client's frames: a close frame ends the exec (its process is killed)."""
        while True:
            try:
                got = read_frame(self.rfile)
            except (OSError, struct.error):
                got = None
            if got is None or got[0] == OP_CLOSE:
                self.closed_by_client.set()
                if proc is not None and proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                if got is not None:
                    self.send(OP_CLOSE, got[1][:2])
                return
            if got[0] == OP_PING:
                self.send(OP_PONG, got[1])

    def finish(self, argv: list[str], code: int) -> None:
        if self.proto == V4:
            self.channel(ERROR, json.dumps(exit_status(argv, code)).encode())
        elif code:
            self.channel(ERROR, exit_status(argv, code)["message"].encode())
        if not self.closed_by_client.is_set():
            self.send(OP_CLOSE, struct.pack("!H", 1000))
            self.closed_by_client.wait(5)  # the client answers with its own close frame
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


def run(session: Session, target: Target, argv: list[str]) -> None:
    """Run argv in target's namespaces, streaming its output, until it exits or the client
    closes."""
    pid = target.init_pid()
    deadline = time.monotonic() + ENTER_TIMEOUT_S
    while pid is not None and not target.entered(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
        pid = target.init_pid()
    path = target.env.get("PATH")
    # the image is this interpreter's environment, for exec as for the container's entrypoint
    # (Cluster.argv): its programs are found there, never by luck on the test machine's PATH
    program = command_argv(argv) or argv
    if pid is None or shutil.which(program[0], path=path) is None:
        listener = threading.Thread(target=session.listen, args=(None,), daemon=True)
        listener.start()
        session.channel(
            STDERR,
            (
                "OCI runtime exec failed: exec failed: unable to start container process: "
                f'exec: "{argv[0]}": executable file not found in $PATH: unknown\n'
            ).encode(),
        )
        session.finish(argv, NOT_FOUND_EXIT)
        return
    enter = ["nsenter", f"--target={pid}", "--pid", "--mount", "--uts", f"--wd={target.cwd}"]
    proc = subprocess.Popen(
        [*enter, "--", *program],
        env=target.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the client's close frame kills nsenter and the command
    )
    listener = threading.Thread(target=session.listen, args=(proc,), daemon=True)
    listener.start()
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        threading.Thread(target=session.pump, args=(proc.stdout, STDOUT), daemon=True),
        threading.Thread(target=session.pump, args=(proc.stderr, STDERR), daemon=True),
    ]
    for t in pumps:
        t.start()
    rc = proc.wait()
    for t in pumps:
        t.join(5)
    session.finish(argv, 128 - rc if rc < 0 else rc)


def serve(handler: BaseHTTPRequestHandler, target: Target, argv: list[str]) -> None:
    """Answer `handler`'s request with the upgrade to the channel protocol, then run argv in
    target's namespaces over it; ApiError (400) before the upgrade when it cannot be made."""
    if "websocket" not in (handler.headers.get("Upgrade") or "").lower():
        raise ApiError(400, "BadRequest", "Upgrade request required")
    proto = choose_protocol(handler.headers.get("Sec-WebSocket-Protocol"))
    if proto is None:
        raise ApiError(400, "BadRequest", "no supported WebSocket subprotocol offered")
    handler.send_response(101, "Switching Protocols")
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header(
        "Sec-WebSocket-Accept", accept_key(handler.headers.get("Sec-WebSocket-Key") or "")
    )
    handler.send_header("Sec-WebSocket-Protocol", proto)
    handler.end_headers()
    handler.wfile.flush()
    session = Session(handler.rfile, handler.wfile, handler.connection, proto)  # type: ignore[arg-type]
    run(session, target, argv)
