"""A server whose engine died shuts down at once, even with a connection made as its listener
closed: uvicorn asks only the connections it had at the start of its shutdown to close, and a
later one would hold the process for its keep-alive (5 s of wall time, 500 s of a x100 lab)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from labengine.server import process


async def _ok(_: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _shutdown_with_a_late_connection(base: type[uvicorn.Server]) -> float:
    app = Starlette(routes=[Route("/", _ok)])
    config = uvicorn.Config(
        app, log_config=None, lifespan="off", timeout_keep_alive=6, timeout_graceful_shutdown=30
    )
    hidden: list[Any] = []

    class Late(base):  # type: ignore[valid-type,misc]
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # the connection is made just after uvicorn's own round of requests to close
            conn = hidden[0]
            self.server_state.connections.discard(conn)
            asyncio.get_running_loop().call_later(0.02, self.server_state.connections.add, conn)
            await super().shutdown(sockets)

    server = Late(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection(*sock.getsockname())
    writer.write(b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n")
    await writer.drain()
    await reader.readuntil(b"ok")  # answered; the connection stays open (keep-alive)
    hidden.append(next(iter(server.server_state.connections)))
    t0 = time.monotonic()
    server.should_exit = True
    await asyncio.wait_for(serving, 60)
    took = time.monotonic() - t0
    assert await reader.read() == b""  # the server closed it
    writer.close()
    return took


def test_a_late_idle_connection_does_not_hold_the_shutdown() -> None:
    assert asyncio.run(_shutdown_with_a_late_connection(process._Server)) < 2.0


def test_without_asking_again_uvicorn_waits_out_the_keep_alive() -> None:
    """What the subclass is for: uvicorn's own server waits for the late connection."""
    assert asyncio.run(_shutdown_with_a_late_connection(uvicorn.Server)) >= 5.5
