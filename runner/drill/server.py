"""The drill's live page: a small starlette app on uvicorn, in a thread of the drill's process,
reading nothing but a DrillBus. It serves two views of the drill (runner.drill.views): the
responder's at `/responder/<token>/`, which gives nothing of the answer away until the drill has
ended, and the facilitator's at `/facilitator/<token>/`, which shows everything. Each view has a
token of its own, random: the responder's is the drill's (a workshop gives each seat one, printed
on its card), the facilitator's is told only to the one who started the drill. Under either root:

    GET  ./         the page (one self-contained HTML file: no external asset, works offline)
    GET  ./events   server-sent events: `snapshot` ({"view", "status", "events", "lines",
                    "actors"}), then one `drill` ({"event", "status", "line"}) per bus event, a
                    `: keep-alive` comment every 15 s, and `end` when the bus closes; on the
                    responder's stream, a second `snapshot`, whole, when the drill ends
    GET  ./status   the status as JSON
    POST ./ack, ./hint, ./give-up   a person's request, passed to `bus.request`: {"message": ...}

`lines` and `line` are the page's event list, a node's crash loop folded into one line.

Every route needs its view's token: whoever can reach the port (any local user, another seat's
attendee) reads and acts on nothing without it. `/` is a page that asks for the token and
tells nothing; a missing or wrong token is a 401, the tokens compared in constant time. The page
carries its token in its own address, so its requests (relative) carry it too.

It listens on 127.0.0.1 unless the caller names another address (a workshop whose attendees
reach it from their own machines). A POST needs the header `X-Gameday: 1`, which a cross-site
form cannot send and a cross-site script cannot send without a CORS preflight that this app never
grants; the Host header must name the address it listens on (or the name it is reached by, or
loopback), so that a DNS-rebound name reaches nothing. Each open stream has its own
subscription, read by its own thread, so a slow browser never slows the drill.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
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
from runner.errors import InputError, LabError
from runner.results.drill_record import Actor

__all__ = [
    "FACILITATOR",
    "HOST",
    "KEEPALIVE_S",
    "RESPONDER",
    "ServerHandle",
    "check_listen",
    "check_name",
    "check_token",
    "new_token",
    "sse_frame",
    "start_server",
]

HOST = "127.0.0.1"
KEEPALIVE_S = 15.0
STOP_S = 2.0  # stop() returns within this, open streams or not
_NONCE = "__GAMEDAY_NONCE__"
_PAGE = resources.files("runner.drill").joinpath("templates/page.html")
_ASK = resources.files("runner.drill").joinpath("templates/token.html")
_VIEW = "__GAMEDAY_VIEW__"
_POSTS = {"ack": Request.ACK, "hint": Request.HINT, "give-up": Request.GIVE_UP}
RESPONDER = "/responder/{token}/"
FACILITATOR = "/facilitator/{token}/"
MIN_TOKEN, MAX_TOKEN = 16, 128
TOKEN_SHAPE = re.compile(rf"[A-Za-z0-9_-]{{{MIN_TOKEN},{MAX_TOKEN}}}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
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


_REFUSED = "refused: this page needs its token (the address on the seat card, or the drill's)"


def _same(given: str, token: str) -> bool:
    """Whether `given` is `token`, in time that does not depend on where they differ."""
    return hmac.compare_digest(given.encode(), token.encode())


def check_token(token: str) -> str:
    """`token` when it is one a URL path carries as it is (letters, digits, `-`, `_`) and long
    enough not to be guessed; ValueError otherwise."""
    if not TOKEN_SHAPE.fullmatch(token):
        raise ValueError(f"a drill's token is {MIN_TOKEN}..{MAX_TOKEN} letters, digits, '-' or '_'")
    return token


def new_token() -> str:
    return secrets.token_urlsafe(18)


class _App:
    def __init__(self, bus: DrillBus, keepalive_s: float, token: str, hosts: list[str]) -> None:
        self.bus = bus
        self.keepalive_s = keepalive_s
        self.token = token  # the responder's
        self.facilitator_token = new_token()
        self.hosts = hosts
        self.streams = _Streams()
        self.page = _PAGE.read_text(encoding="utf-8")
        self.ask = _ASK.read_text(encoding="utf-8")

    def build(self) -> Starlette:
        routes: list[Route] = [
            Route("/", self.asking),
            Route("/{rest:path}", self.refused, methods=["GET", "POST"]),
        ]
        for root, view in ((RESPONDER, View.RESPONDER), (FACILITATOR, View.FACILITATOR)):
            routes[-1:-1] = [
                Route(root, self.guarded(view, self.index)),
                Route(root + "events", self.guarded(view, self.events)),
                Route(root + "status", self.guarded(view, self.status)),
                *(
                    Route(root + path, self.guarded(view, self.post), methods=["POST"])
                    for path in _POSTS
                ),
            ]
        return Starlette(
            routes=routes,
            middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=self.hosts)],
        )

    def guarded(
        self, view: View, endpoint: Callable[[HttpRequest, View], Awaitable[Response]]
    ) -> Callable[[HttpRequest], Awaitable[Response]]:
        """`endpoint` for `view`, reached only with that view's token in the path."""
        token = self.token if view is View.RESPONDER else self.facilitator_token

        async def route(request: HttpRequest) -> Response:
            if not _same(str(request.path_params.get("token", "")), token):
                return await self.refused(request)
            return await endpoint(request, view)

        return route

    def _headers(self) -> tuple[str, dict[str, str]]:
        nonce = secrets.token_urlsafe(16)
        csp = (
            "default-src 'none'; connect-src 'self'; img-src 'self' data:; "
            f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        )
        # no-referrer: the page's address holds its token
        headers = {
            "Content-Security-Policy": csp,
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
        }
        return nonce, headers

    async def asking(self, request: HttpRequest) -> Response:
        """`/`: a page that asks for the token, and tells nothing of the drill."""
        nonce, headers = self._headers()
        return HTMLResponse(self.ask.replace(_NONCE, nonce), 401, headers=headers)

    async def refused(self, request: HttpRequest) -> Response:
        """A route without its token, or with a wrong one: the asking page for a page's
        address, else a 401 in JSON (nothing says which tokens exist)."""
        if (
            request.method == "GET"
            and request.url.path.endswith("/")
            and ("text/html" in request.headers.get("accept", ""))
        ):
            return await self.asking(request)
        return JSONResponse({"message": _REFUSED}, 401, headers={"Cache-Control": "no-store"})

    async def index(self, request: HttpRequest, view: View) -> Response:
        nonce, headers = self._headers()
        page = self.page.replace(_NONCE, nonce).replace(_VIEW, view.value)
        return HTMLResponse(page, headers=headers)

    async def status(self, request: HttpRequest, view: View) -> Response:
        return JSONResponse(status_for(view, self.bus.status).model_dump(mode="json"))

    async def post(self, request: HttpRequest, view: View) -> Response:
        if request.headers.get("x-gameday") != "1":
            return JSONResponse({"message": "refused: the header X-Gameday: 1 is missing"}, 403)
        req = _POSTS[request.url.path.rsplit("/", 1)[-1]]
        try:
            answer = await run_in_threadpool(self.bus.request, req, {"source": "page"})
        except ValueError as exc:
            return JSONResponse({"message": str(exc)}, 409)
        return JSONResponse({"message": answer})

    async def events(self, request: HttpRequest, view: View) -> Response:
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


class ServerHandle:
    """A running page server: its `url` (the responder's page, its token in the path),
    `facilitator_url`, `token` (the responder's), `stop()`."""

    def __init__(
        self, app: _App, server: uvicorn.Server, thread: threading.Thread, root: str, local: str
    ):
        self._app = app
        self._server = server
        self._thread = thread
        self.root = root  # the page that asks for the token
        self.token = app.token
        self.url = root.rstrip("/") + RESPONDER.format(token=app.token)
        self.facilitator_url = root.rstrip("/") + FACILITATOR.format(token=app.facilitator_token)
        # the responder's page at the address it listens on, as this machine reaches it
        self.local_url = local.rstrip("/") + RESPONDER.format(token=app.token)

    def stop(self) -> None:
        """Ends every open stream, then the server; returns within STOP_S."""
        self._app.streams.close_all()
        self._server.should_exit = True
        self._thread.join(STOP_S - 0.2)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(0.2)


def check_listen(address: str) -> str:
    """`address` when a page may listen on it: an IPv4 address of one interface. A wildcard
    (0.0.0.0) is refused: it would serve every network the machine is on, and no card could
    name the address attendees reach. InputError (exit 2) otherwise."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        raise InputError(
            f"--listen takes an IPv4 address of this machine, not {address!r}",
            field="--listen",
            hint="the address attendees reach, e.g. 192.168.1.20 (`ip -4 addr` lists them)",
        ) from None
    if ip.is_unspecified or ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise InputError(
            f"--listen {address} is no one interface's address: name the one attendees reach",
            field="--listen",
            hint="e.g. 192.168.1.20 (`ip -4 addr` lists this machine's)",
        )
    return address


def check_name(name: str) -> str:
    """A host name (or address) browsers reach the page by, as a Host header names it."""
    if not HOST_NAME.fullmatch(name):
        raise InputError(
            f"--public-name takes a host name or an IPv4 address, not {name!r}",
            field="--public-name",
        )
    return name.lower()


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
    bus: DrillBus,
    port: int = 0,
    host: str = HOST,
    *,
    keepalive_s: float = KEEPALIVE_S,
    token: str | None = None,
    public_name: str | None = None,
) -> ServerHandle:
    """Serves the drill's page for `bus` on http://`host`:`port`/ (0: any free port) in a
    background thread, and returns once it answers. `token`: the responder's (a workshop
    seat's; None: a new random one); `public_name`: the name browsers reach `host` by, in the
    page's address and accepted as its Host (default: `host`).

    InputError for a `host` that is no interface's address or a malformed name, ValueError for
    a malformed token; LabError when the port is in use."""
    if host != HOST:
        check_listen(host)
    name = check_name(public_name) if public_name else host
    app = _App(
        bus,
        keepalive_s,
        check_token(token) if token is not None else new_token(),
        sorted({HOST, "localhost", host, name}),
    )
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
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
    return ServerHandle(app, server, thread, f"http://{name}:{bound}/", f"http://{host}:{bound}/")
