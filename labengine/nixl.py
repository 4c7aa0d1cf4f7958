"""The NixlConnector's side channel in the lab engine: the listener every KV-transfer engine runs,
and the decode side's handshake with the prefill engine its request names
(vllmfacts.kvtransfer has the source lines).

vLLM speaks ZMQ here (a ROUTER bound to VLLM_NIXL_SIDE_CHANNEL_HOST:PORT, a REQ socket on the
decode side with a 5 s receive timeout). The lab engine keeps its dependencies to the standard
library and its peers are lab engines, so the wire is one JSON line each way over TCP; what a
peer sees is vLLM's: a ZMQ connect never fails on its own (it retries in the background), so a
side channel nobody listens on is the receive timeout after 5 s, and a listener of another
engine is the engine-id mismatch.

Its loopback is its network namespace's own. A process bound or dialling `localhost` reaches
only the processes of its own network namespace, and the lab's processes in different
namespaces (pods, containers) have different host names; the Kubernetes test server's pods,
though, share the machine's network stack (each is a process on a loopback IP of its own). So the
lab engine puts a loopback host on an address of its host name's own, in 127.0.0.0/8: the
processes under one host name (the local lab's nodes, one pod's) share it, as they share a
loopback, and a pod's is no other pod's, as on a cluster.
"""

from __future__ import annotations

import hashlib
import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field

from vllmfacts.kvtransfer import HANDSHAKE_TIMEOUT_S, RECV_TIMEOUT_ERROR, engine_id_mismatch

GET_META_MSG = b"get_meta_msg"  # vLLM's GET_META_MSG (nixl/metadata.py)


class HandshakeError(Exception):
    """The handshake failed: `final` is the exception's last traceback line (`Type: message`)."""

    def __init__(self, final: str) -> None:
        super().__init__(final)
        self.final = final


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        if self.rfile.readline().strip() != GET_META_MSG:
            return
        server: _Server = self.server  # type: ignore[assignment]
        self.wfile.write(json.dumps({"engine_id": server.engine_id}).encode() + b"\n")


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine_id: str) -> None:
        self.engine_id = engine_id
        super().__init__(address, _Handler)


LOOPBACK = frozenset(("localhost", "127.0.0.1", "::1"))


def own_address(host: str) -> str:
    """The address a side channel on `host` is bound or dialled at: a loopback host is this
    host name's own loopback address (127.200.0.0 to 127.249.255.255, which no lab uses);
    any other host is itself."""
    if host not in LOOPBACK:
        return host
    h = hashlib.sha256(socket.gethostname().encode()).digest()
    return f"127.{200 + h[0] % 50}.{h[1]}.{1 + h[2] % 254}"


def listen(host: str, port: int, engine_id: str) -> socketserver.BaseServer:
    """Serve this engine's handshake metadata on host:port from a daemon thread (vLLM's
    `nixl_handshake_listener`). OSError when the address cannot be bound."""
    server = _Server((own_address(host), port), engine_id)
    threading.Thread(
        target=server.serve_forever, name="nixl_handshake_listener", daemon=True
    ).start()
    return server


@dataclass
class Handshakes:
    """The decode side's handshakes: one per remote engine, kept once it succeeded."""

    time_scale: float = 1.0
    done: set[str] = field(default_factory=set)

    def ensure(self, host: str, port: int, expected_engine_id: str) -> None:
        """Handshake with the engine at host:port unless done already; HandshakeError."""
        if expected_engine_id in self.done:
            return
        timeout = HANDSHAKE_TIMEOUT_S / max(self.time_scale, 1.0)
        deadline = time.monotonic() + timeout
        reply = b""
        while not reply:
            left = deadline - time.monotonic()
            if left <= 0:
                raise HandshakeError(RECV_TIMEOUT_ERROR)
            try:
                with socket.create_connection((own_address(host), port), timeout=left) as sock:
                    sock.settimeout(left)
                    sock.sendall(GET_META_MSG + b"\n")
                    reply = sock.makefile("rb").readline()
            except TimeoutError:
                raise HandshakeError(RECV_TIMEOUT_ERROR) from None
            except OSError:
                # ZMQ reconnects in the background until the receive times out
                time.sleep(min(0.01, max(left, 0)))
        received = str(json.loads(reply).get("engine_id"))
        if received != expected_engine_id:
            raise HandshakeError(
                "RuntimeError: " + engine_id_mismatch(expected_engine_id, received)
            )
        self.done.add(expected_engine_id)
