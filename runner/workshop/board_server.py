"""The host's page: the scoreboard on 127.0.0.1, pushed to the page by server-sent events, every
seat with its attendee's name and its drill page (its token in the address). It is served at
`/host/<token>/` only, the workshop's host token compared in constant time: the page carries
every seat's token, and any local user can reach a loopback port.

The server stats the seats' status files every 100 ms and rebuilds the scoreboard when one
changed (and every few seconds, for a seat's lab that went up or down, which writes no file);
each new scoreboard that differs from the last is pushed to every open page. The page never
polls; it holds one EventSource. One self-contained HTML file: no external assets, so it works
offline, and the seats' data enters it as text only (textContent), never as markup.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from runner.errors import LabError
from runner.workshop.page import PAGE
from runner.workshop.scoreboard import Scoreboard

WATCH_S = 0.1  # how often the status files' mtimes are read
REFRESH_S = 2.0  # how often the board is rebuilt without a file change (a lab up or down)
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies and browsers from timing out
CLOSE_CHECK_S = 0.25  # how soon an open stream ends once the server is stopping
HOST = "127.0.0.1"
ROOT = "/host/{token}/"


class Feed:
    """The current scoreboard and its readers: each reader gets its own queue of boards."""

    def __init__(self, build: Callable[[], Scoreboard], files: Callable[[], list[Path]]) -> None:
        self._build = build
        self._files = files
        self._readers: set[asyncio.Queue[Scoreboard]] = set()
        self.current: Scoreboard | None = None
        self.closed = False  # set when the server stops: every open stream ends

    def subscribe(self) -> asyncio.Queue[Scoreboard]:
        q: asyncio.Queue[Scoreboard] = asyncio.Queue(maxsize=4)
        self._readers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[Scoreboard]) -> None:
        self._readers.discard(q)

    def _stamps(self) -> tuple[float | None, ...]:
        out: list[float | None] = []
        for p in self._files():
            try:
                out.append(p.stat().st_mtime_ns)
            except OSError:
                out.append(None)
        return tuple(out)

    async def refresh(self) -> None:
        board = await asyncio.to_thread(self._build)
        if self.current is not None and board.seats == self.current.seats:
            return
        self.current = board
        for q in list(self._readers):
            if q.full():  # a slow reader needs the latest board only
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
            q.put_nowait(board)

    async def watch(self) -> None:
        stamps = await asyncio.to_thread(self._stamps)
        await self.refresh()
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(WATCH_S)
            now = await asyncio.to_thread(self._stamps)
            if now != stamps or loop.time() - last >= REFRESH_S:
                stamps, last = now, loop.time()
                await self.refresh()


def _frame(board: Scoreboard) -> str:
    return f"event: scoreboard\ndata: {board.model_dump_json()}\n\n"


def app(feed: Feed, token: str) -> Starlette:
    refused = {"message": "refused: the host page needs its token (`gameday workshop status`)"}

    def guarded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
        async def route(request: Request) -> Response:
            given = str(request.path_params.get("token", "")).encode()
            if not token or not hmac.compare_digest(given, token.encode()):
                return JSONResponse(refused, 401)
            return await endpoint(request)

        return route

    async def nothing(request: Request) -> Response:
        return JSONResponse(refused, 401)

    async def page(request: Request) -> Response:
        headers = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
        return HTMLResponse(PAGE, headers=headers)

    async def board(request: Request) -> Response:
        body = feed.current.model_dump_json() if feed.current else "null"
        return Response(body, media_type="application/json")

    async def events(request: Request) -> Response:
        q = feed.subscribe()

        async def stream() -> AsyncIterator[str]:
            try:
                if feed.current is not None:
                    yield _frame(feed.current)
                quiet = 0.0
                while not feed.closed:  # the stream ends itself when the server stops
                    try:
                        board = await asyncio.wait_for(q.get(), CLOSE_CHECK_S)
                    except TimeoutError:
                        quiet += CLOSE_CHECK_S
                        if quiet >= KEEPALIVE_S:
                            quiet = 0.0
                            yield ": keep-alive\n\n"
                        continue
                    quiet = 0.0
                    yield _frame(board)
            finally:
                feed.unsubscribe(q)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(feed.watch())
        try:
            yield
        finally:
            task.cancel()

    return Starlette(
        routes=[
            Route(ROOT, guarded(page)),
            Route(ROOT + "scoreboard.json", guarded(board)),
            Route(ROOT + "events", guarded(events)),
            Route("/{rest:path}", nothing, methods=["GET", "POST"]),
        ],
        # a page of another site, reached through a rebound DNS name, is not served
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=[HOST, "localhost"])],
        lifespan=lifespan,
    )


@dataclass
class ServerHandle:
    url: str
    feed: Feed
    _server: uvicorn.Server
    _thread: threading.Thread

    def stop(self) -> None:
        self.feed.closed = True
        time.sleep(2 * CLOSE_CHECK_S)  # the open streams end, so the server stops at once
        self._server.should_exit = True
        self._thread.join(10)

    def wait(self) -> None:
        """Until the server stops (Ctrl-C in the CLI)."""
        while self._thread.is_alive():
            self._thread.join(0.5)


def start_server(feed: Feed, port: int = 0, token: str = "") -> ServerHandle:
    """Serve the page on 127.0.0.1:`port` (0: any free port) at `/host/<token>/` from a thread
    (an empty token: nothing is served); LabError when the port is taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise LabError(
            f"cannot serve the scoreboard on {HOST}:{port}: {exc.strerror}",
            hint="choose another --port",
        ) from exc
    actual = sock.getsockname()[1]
    config = uvicorn.Config(
        app(feed, token), log_level="warning", lifespan="on", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="workshop-page", daemon=True
    )
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise LabError(f"the scoreboard server on {HOST}:{actual} did not start")
        threading.Event().wait(0.02)
    return ServerHandle(f"http://{HOST}:{actual}" + ROOT.format(token=token), feed, server, thread)
