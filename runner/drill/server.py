"""The drill's live page: a small starlette app on uvicorn, in a thread of the drill's process,
reading nothing but a DrillBus. It serves two views of the drill (runner.drill.views): the
responder's at `/`, which gives nothing of the answer away until the drill has ended, and the
facilitator's at `/facilitator/<token>/`, which shows everything; the token is the server's own,
random, and only the one who started the drill is told it. Under either root:

    GET  ./         the page (one self-contained HTML file: no external asset, works offline)
    GET  ./events   server-sent events: `snapshot` ({"view", "status", "events", "lines",
                    "actors"}), then one `drill` ({"event", "status", "line"}) per bus event, a
                    `: keep-alive` comment every 15 s, and `end` when the bus closes; on the
                    responder's stream, a second `snapshot`, whole, when the drill ends
    GET  ./status   the status as JSON
    POST ./ack, ./hint, ./give-up   a person's request, passed to `bus.request`: {"message": ...}

`lines` and `line` are the page's event list, a node's crash loop folded into one line.

It listens on 127.0.0.1 only. A POST needs the header `X-Gameday: 1`, which a cross-site form
cannot send and a cross-site script cannot send without a CORS preflight that this app never
grants; the Host header must name the loopback address, so that a DNS-rebound name reaches
nothing. Each open stream has its own subscription, read by its own thread, so a slow browser
never slows the drill.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import errno
import json
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from runner.drill.bus import DrillBus, Request, Subscription
from runner.drill.model import DrillEvent, DrillStatus
from runner.drill.views import Lines, View, event_for, lines, revealed, status_for
from runner.errors import LabError
from runner.results.drill_record import Actor

__all__ = ["HOST", "KEEPALIVE_S", "ServerHandle", "sse_frame", "start_server"]

HOST = "127.0.0.1"
KEEPALIVE_S = 15.0
STOP_S = 2.0  # stop() returns within this, open streams or not
_NONCE = "__GAMEDAY_NONCE__"
_PAGE = resources.files("runner.drill").joinpath("templates/page.html")
_VIEW = "__GAMEDAY_VIEW__"
_POSTS = {"ack": Request.ACK, "hint": Request.HINT, "give-up": Request.GIVE_UP}
FACILITATOR = "/facilitator/{token}/"
_ACTORS = {a.value: a.label for a in Actor}


def sse_frame(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    """One server-sent event. JSON without indentation has no raw newline (a newline inside a
    string is written `\\n`), so the data always fits on a single `data:` line."""
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head + f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _snapshot(view: View, status: DrillStatus, events: list[DrillEvent]) -> dict[str, Any]:
    shown = [e for e in (event_for(view, e, status) for e in events) if e is not None]
    return {
        "view": view.value,
        "status": status_for(view, status).model_dump(mode="json"),
        "events": [e.model_dump(mode="json") for e in shown],
        "lines": [line.as_json() for line in lines(shown)],
        "actors": _ACTORS,
    }


@dataclass
class _Streams:
    """The open streams' subscriptions, so that stopping the server can end them all."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    subs: set[Subscription] = field(default_factory=set)
    stopping: bool = False

    def add(self, sub: Subscription) -> bool:
        with self.lock:
            if self.stopping:
                return False
            self.subs.add(sub)
            return True

    def remove(self, sub: Subscription) -> None:
        with self.lock:
            self.subs.discard(sub)
        sub.close()

    def close_all(self) -> None:
        with self.lock:
            self.stopping = True
            subs, self.subs = list(self.subs), set()
        for s in subs:
            s.close()


def _pump(sub: Subscription, loop: asyncio.AbstractEventLoop, q: asyncio.Queue[Any]) -> None:
    """Moves a subscription's events onto the stream's asyncio queue; None marks its end (the
    bus closed, the browser left, or the server stops: each closes the subscription)."""
    try:
        for event in sub:
            loop.call_soon_threadsafe(q.put_nowait, event)
    except RuntimeError:  # the loop has closed: nobody is left to read
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(q.put_nowait, None)


class _Missing(Exception):
    """A facilitator's path with a token that is not the server's."""


class _Kind(enum.Enum):
    PAGE = enum.auto()
    EVENTS = enum.auto()
    STATUS = enum.auto()


class _App:
    def __init__(self, bus: DrillBus, keepalive_s: float, token: str) -> None:
        self.bus = bus
        self.keepalive_s = keepalive_s
        self.token = token
        self.streams = _Streams()
        self.page = _PAGE.read_text(encoding="utf-8")

    def build(self) -> Starlette:
        routes: list[Route] = []
        for root in ("/", FACILITATOR):
            routes += [
                Route(root, self.index),
                Route(root + "events", self.events),
                Route(root + "status", self.status),
                *(Route(root + path, self.post, methods=["POST"]) for path in _POSTS),
            ]
        hosts = [HOST, "localhost"]
        return Starlette(
            routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)]
        )

    def view(self, request: HttpRequest) -> View:
        """The view the path asks for; _Missing for a facilitator's path with a wrong token."""
        token = request.path_params.get("token")
        if token is None:
            return View.RESPONDER
        if not secrets.compare_digest(str(token).encode(), self.token.encode()):
            raise _Missing
        return View.FACILITATOR

    async def index(self, request: HttpRequest) -> Response:
        try:
            view = self.view(request)
        except _Missing:
            return _not_found()
        nonce = secrets.token_urlsafe(16)
        csp = (
            "default-src 'none'; connect-src 'self'; img-src 'self' data:; "
            f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        headers = {"Content-Security-Policy": csp, "Cache-Control": "no-store"}
        page = self.page.replace(_NONCE, nonce).replace(_VIEW, view.value)
        return HTMLResponse(page, headers=headers)

    async def status(self, request: HttpRequest) -> Response:
        try:
            view = self.view(request)
        except _Missing:
            return _not_found()
        return JSONResponse(status_for(view, self.bus.status).model_dump(mode="json"))

    async def post(self, request: HttpRequest) -> Response:
        try:
            self.view(request)
        except _Missing:
            return _not_found()
        if request.headers.get("x-gameday") != "1":
            return JSONResponse({"message": "refused: the header X-Gameday: 1 is missing"}, 403)
        req = _POSTS[request.url.path.rsplit("/", 1)[-1]]
        try:
            answer = await run_in_threadpool(self.bus.request, req, {"source": "page"})
        except ValueError as exc:
            return JSONResponse({"message": str(exc)}, 409)
        return JSONResponse({"message": answer})

    async def events(self, request: HttpRequest) -> Response:
        try:
            view = self.view(request)
        except _Missing:
            return _not_found()
        sub = self.bus.subscribe()
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(
            self._stream(sub, view), media_type="text/event-stream", headers=headers
        )

    async def _stream(self, sub: Subscription, view: View) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue[DrillEvent | None] = asyncio.Queue()
        snap = sub.snapshot
        try:
            if not self.streams.add(sub):
                return
            threading.Thread(target=_pump, args=(sub, loop, q), daemon=True).start()
            yield "retry: 1000\n\n"
            last = snap.events[-1].seq if snap.events else 0
            yield sse_frame("snapshot", _snapshot(view, snap.status, snap.events), last or None)
            shown = revealed(view, snap.status)
            folder = Lines()
            for e in snap.events:
                if (seen := event_for(view, e, snap.status)) is not None:
                    folder.add(seen)
            while True:
                try:
                    event = await asyncio.wait_for(q.get(), self.keepalive_s)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if event is None:
                    break
                if event.seq <= last:
                    continue  # in the snapshot already
                status = self.bus.status
                if not shown and revealed(view, status):
                    # the drill has ended: the after-action, whole, in place of what was kept
                    shown = True
                    events = self.bus.events()
                    last = events[-1].seq
                    yield sse_frame("snapshot", _snapshot(view, status, events), last)
                    folder = Lines()
                    for e in events:
                        folder.add(e)
                    continue
                last = event.seq
                seen = event_for(view, event, status)
                if seen is None:
                    continue
                payload = {
                    "event": seen.model_dump(mode="json"),
                    "status": status_for(view, status).model_dump(mode="json"),
                    "line": folder.add(seen).as_json(),
                }
                yield sse_frame("drill", payload, event.seq)
            if not self.streams.stopping:
                yield sse_frame("end", {"phase": self.bus.status.phase.value})
        finally:
            self.streams.remove(sub)


def _not_found() -> Response:
    return JSONResponse({"message": "not found"}, 404)


class ServerHandle:
    """A running page server: its `url` (the responder's page), `facilitator_url`, `stop()`."""

    def __init__(self, app: _App, server: uvicorn.Server, thread: threading.Thread, url: str):
        self._app = app
        self._server = server
        self._thread = thread
        self.url = url
        self.facilitator_url = url.rstrip("/") + FACILITATOR.format(token=app.token)

    def stop(self) -> None:
        """Ends every open stream, then the server; returns within STOP_S."""
        self._app.streams.close_all()
        self._server.should_exit = True
        self._thread.join(STOP_S - 0.2)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(0.2)


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LabError(
                f"the drill page cannot listen on {host}:{port}: the port is in use",
                hint="choose another port, or 0 for any free one",
            ) from exc
        raise LabError(f"the drill page cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(False)
    return sock


def start_server(
    bus: DrillBus, port: int = 0, host: str = HOST, *, keepalive_s: float = KEEPALIVE_S
) -> ServerHandle:
    """Serves the drill's page for `bus` on http://127.0.0.1:`port`/ (0: any free port) in a
    background thread, and returns once it answers.

    ValueError for any host but 127.0.0.1 (the page takes requests from whoever reaches it);
    LabError when the port is in use."""
    if host != HOST:
        raise ValueError(f"the drill page listens on {HOST} only, not {host!r}")
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    app = _App(bus, keepalive_s, secrets.token_urlsafe(18))
    config = uvicorn.Config(
        app.build(),
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])), name="drill-page", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise LabError(f"the drill page did not start on {host}:{bound}")
        time.sleep(0.01)
    url = f"http://{host}:{bound}/"
    return ServerHandle(app, server, thread, url)
