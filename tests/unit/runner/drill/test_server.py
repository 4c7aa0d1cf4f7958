"""The drill's page server: its SSE stream (snapshot, one frame per event, keep-alives, the end),
/status, the POSTs and their header, the tokens every route needs, the Host rules, the address it
listens on, and stop() with streams open."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from runner.drill.bus import DrillBus, Request
from runner.drill.model import DrillPhase, DrillStatus, EventKind, NodeView
from runner.drill.server import ServerHandle, sse_frame, start_server
from runner.errors import InputError, LabError
from runner.results.drill_record import ActionKind, ObservedAction
from runner.spec.kinds import NodeStatus, Outcome

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def status(phase: DrillPhase = DrillPhase.HANDED_OVER, clock: float | None = 4.0) -> DrillStatus:
    node = NodeView(name="node1", status=NodeStatus.RUNNING, ready=True, restarts=0, generation=1)
    return DrillStatus(
        scenario="head-only-restart",
        title="Head restarted alone",
        lab="local",
        phase=phase,
        started_at=T0,
        clock_s=clock,
        nodes=(node,),
    )


@pytest.fixture
def bus() -> DrillBus:
    return DrillBus(status())


@pytest.fixture
def server(bus: DrillBus) -> Iterator[ServerHandle]:
    handle = start_server(bus, keepalive_s=0.2)
    yield handle
    handle.stop()


def frames(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any] | None, str]]:
    """(event name, data, raw) per SSE frame; comments come as ("comment", None, text)."""
    buf: list[str] = []
    for line in lines:
        if line:
            buf.append(line)
            continue
        if not buf:
            continue
        raw, buf = "\n".join(buf), []
        if raw.startswith(":"):
            yield "comment", None, raw
            continue
        fields = dict(f.split(": ", 1) for f in raw.splitlines() if ": " in f)
        if "event" in fields:
            yield fields["event"], json.loads(fields["data"]), raw


def test_an_sse_frame_is_one_data_line_whatever_the_text() -> None:
    assert sse_frame("drill", {"text": "a\nb"}, 7) == (
        'event: drill\nid: 7\ndata: {"text":"a\\nb"}\n\n'
    )
    assert sse_frame("end", {"phase": "done"}) == 'event: end\ndata: {"phase":"done"}\n\n'


def test_the_stream_sends_the_snapshot_each_event_and_the_end(
    bus: DrillBus, server: ServerHandle
) -> None:
    bus.publish(EventKind.PHASE, "handed over")
    got: list[tuple[str, dict[str, Any] | None, str]] = []
    with httpx.stream("GET", server.url + "events", timeout=5) as r:
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        it = frames(r.iter_lines())
        got.append(next(it))
        exited = status().nodes[0].model_copy(update={"status": NodeStatus.EXITED, "ready": False})
        bus.publish(
            EventKind.NODE,
            "node1: exited (code 1)",
            {"node": "node1"},
            status=status(clock=9.5).model_copy(update={"nodes": (exited,)}),
        )
        bus.close()
        got.extend(f for f in it if f[0] != "comment")
    assert [name for name, _, _ in got] == ["snapshot", "drill", "end"]
    snap, drill, end = (d for _, d, _ in got)
    assert snap is not None and drill is not None
    assert snap["status"]["phase"] == "handed_over"
    assert [(e["seq"], e["text"]) for e in snap["events"]] == [(1, "handed over")]
    assert got[1][2].startswith("event: drill\nid: 2\ndata: ")
    assert drill["event"]["kind"] == "node"
    assert drill["event"]["text"] == "node1: exited (code 1)"
    assert drill["event"]["data"] == {"node": "node1"}
    assert drill["event"]["at_s"] == 9.5
    assert drill["status"]["nodes"] == [
        {
            "name": "node1",
            "status": "exited",
            "ready": False,
            "restarts": 0,
            "generation": 1,
            "crash_looping": False,
        }
    ]
    assert end == {"phase": "handed_over"}


def test_an_idle_stream_gets_keep_alive_comments(server: ServerHandle) -> None:
    with httpx.stream("GET", server.url + "events", timeout=5) as r:
        it = frames(r.iter_lines())
        assert next(it)[0] == "snapshot"
        assert next(it) == ("comment", None, ": keep-alive")


def test_status_is_the_bus_status_as_json_whole_for_the_facilitator_only(
    bus: DrillBus, server: ServerHandle
) -> None:
    r = httpx.get(server.facilitator_url + "status")
    assert r.status_code == 200
    assert r.json() == json.loads(bus.status.model_dump_json())
    assert r.json()["clock_s"] == 4.0
    mine = httpx.get(server.url + "status").json()
    assert (mine["scenario"], mine["title"], mine["clock_s"]) == ("", "gameday drill", 4.0)


SHORTCUT = ObservedAction(
    at_s=6.0,
    kind=ActionKind.RESTART,
    nodes=("node1",),
    detail="restarted",
    step="Restart the head alone",
    outcome=Outcome.DOES_NOT_RESTORE,
    shortcut=True,
    why="the workers keep the old head's generation",
)


def _stream(url: str, until: str, act: Any) -> list[tuple[str, dict[str, Any] | None, str]]:
    got = []
    with httpx.stream("GET", url + "events", timeout=5) as r:
        it = frames(r.iter_lines())
        got.append(next(it))
        act()
        for f in it:
            if f[0] != "comment":
                got.append(f)
            if f[0] == until:
                break
    return got


def test_the_responder_reads_no_answer_until_the_drill_ends_then_all_of_it(
    bus: DrillBus, server: ServerHandle
) -> None:
    injecting = status(DrillPhase.INJECT, clock=None)
    bus.publish(
        EventKind.TIMELINE, "inject: set_args node1 --max-model-len 99999", status=injecting
    )
    st = status().model_copy(update={"actions": (SHORTCUT,)})
    text = "shortcut: Restart the head alone: the workers keep the old head's generation"

    got = []
    with httpx.stream("GET", server.url + "events", timeout=5) as r:
        it = (f for f in frames(r.iter_lines()) if f[0] != "comment")
        got.append(next(it))
        bus.publish(EventKind.ACTION, text, SHORTCUT.model_dump(mode="json"), status=st)
        got.append(next(it))
        ended = st.model_copy(update={"phase": DrillPhase.GAVE_UP})
        bus.publish(EventKind.PHASE, "gave up", status=ended)
        bus.close()
        got.extend(it)
    assert [name for name, _, _ in got] == ["snapshot", "drill", "snapshot", "end"]
    (_, first, _), (_, drill, raw), (_, after, _) = got[:3]
    assert first is not None and drill is not None and after is not None
    before = raw + json.dumps(first)
    for secret in ("head-only-restart", "Head restarted alone", "old head", "head alone", "99999"):
        assert secret not in before, secret
    assert (first["view"], first["status"]["title"], first["events"]) == (
        "responder",
        "gameday drill",
        [],
    )
    assert drill["line"]["text"] == "shortcut: restart node1: restarted (outside tool)"
    assert drill["status"]["actions"][0]["shortcut"] is True
    # the after-action: everything, the events kept back too
    assert after["status"]["title"] == "Head restarted alone"
    assert [ln["text"] for ln in after["lines"]] == [
        "inject: set_args node1 --max-model-len 99999",
        text + " (outside tool)",
        "gave up",
    ]


def test_the_facilitator_reads_everything_at_its_token_s_path_only(
    bus: DrillBus, server: ServerHandle
) -> None:
    assert server.facilitator_url.startswith(server.root + "facilitator/")
    st = status().model_copy(update={"actions": (SHORTCUT,)})

    def act() -> None:
        bus.publish(EventKind.ACTION, "shortcut: x: y", SHORTCUT.model_dump(mode="json"), status=st)

    got = _stream(server.facilitator_url, "drill", act)
    (_, snap, _), (_, drill, _) = got
    assert snap is not None and drill is not None
    assert (snap["view"], snap["status"]["title"]) == ("facilitator", "Head restarted alone")
    assert drill["status"]["actions"][0]["why"] == SHORTCUT.why
    page = httpx.get(server.facilitator_url)
    assert page.status_code == 200 and "facilitator's view" in page.text
    assert "responder's view" in httpx.get(server.url).text
    wrong = server.root + "facilitator/" + "x" * 24 + "/"
    for path in ("", "events", "status"):
        assert httpx.get(wrong + path).status_code == 401
    assert httpx.post(wrong + "ack", headers={"X-Gameday": "1"}).status_code == 401
    # the responder's token opens the responder's view only
    assert httpx.get(server.root + f"facilitator/{server.token}/status").status_code == 401
    # the facilitator's buttons need the header too
    assert httpx.post(server.facilitator_url + "hint").status_code == 403


def test_posts_without_the_header_are_refused(bus: DrillBus, server: ServerHandle) -> None:
    seen: list[Request] = []
    bus.on_request(lambda req, data: seen.append(req) or "ok")
    for path in ("ack", "hint", "give-up"):
        r = httpx.post(server.url + path)
        assert r.status_code == 403
        assert r.json() == {"message": "refused: the header X-Gameday: 1 is missing"}
    assert seen == []


def test_posts_reach_the_drill_and_answer_its_message(bus: DrillBus, server: ServerHandle) -> None:
    seen: list[tuple[Request, dict[str, Any]]] = []

    def handler(req: Request, data: dict[str, Any]) -> str:
        seen.append((req, data))
        return f"{req.value} noted"

    bus.on_request(handler)
    answers = [
        httpx.post(server.url + path, headers={"X-Gameday": "1"}).json()
        for path in ("ack", "hint", "give-up")
    ]
    assert answers == [
        {"message": "ack noted"},
        {"message": "hint noted"},
        {"message": "give_up noted"},
    ]
    assert seen == [
        (Request.ACK, {"source": "page"}),
        (Request.HINT, {"source": "page"}),
        (Request.GIVE_UP, {"source": "page"}),
    ]


def test_a_post_before_the_drill_takes_requests_is_a_conflict(server: ServerHandle) -> None:
    r = httpx.post(server.url + "ack", headers={"X-Gameday": "1"})
    assert (r.status_code, r.json()) == (409, {"message": "this drill takes no requests yet"})


def test_a_foreign_host_name_reaches_nothing(server: ServerHandle) -> None:
    r = httpx.get(server.url + "status", headers={"Host": "attacker.example:80"})
    assert r.status_code == 400


def test_the_page_is_self_contained(server: ServerHandle) -> None:
    r = httpx.get(server.url)
    assert r.status_code == 200
    page = r.text
    assert re.findall(r"https?://|\bsrc=|\bhref=|@import|url\(", page) == []
    nonce = re.search(r'<script nonce="([^"]+)">', page)
    assert nonce is not None and "__GAMEDAY_NONCE__" not in page
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert f"script-src 'nonce-{nonce.group(1)}'" in csp
    assert ".innerHTML" not in page and "new EventSource(" in page


def test_stop_returns_quickly_with_a_stream_open(bus: DrillBus) -> None:
    handle = start_server(bus)
    opened = threading.Event()
    lines: list[str] = []

    def read() -> None:
        try:
            with httpx.stream("GET", handle.url + "events", timeout=10) as r:
                for line in r.iter_lines():
                    lines.append(line)
                    opened.set()
        except httpx.HTTPError:
            pass

    reader = threading.Thread(target=read)
    reader.start()
    assert opened.wait(5)
    t0 = time.monotonic()
    handle.stop()
    took = time.monotonic() - t0
    reader.join(5)
    assert took < 2.0
    assert not reader.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(handle.url + "status")


def test_no_wildcard_address_and_no_malformed_token() -> None:
    for address in ("0.0.0.0", "255.255.255.255", "localhost", "::"):
        with pytest.raises(InputError) as exc:
            start_server(DrillBus(status()), host=address)
        assert exc.value.exit_code == 2 and exc.value.field == "--listen", address
    for token in ("short", "x" * 20 + "/../", "x" * 20 + "?a=1"):
        with pytest.raises(ValueError):
            start_server(DrillBus(status()), token=token)


def test_a_port_in_use_is_a_lab_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(LabError) as exc:
            start_server(DrillBus(status()), port=port)
    assert exc.value.message == (
        f"the drill page cannot listen on 127.0.0.1:{port}: the port is in use"
    )
    assert exc.value.exit_code == 3


REFUSED = "refused: this page needs its token (the address on the seat card, or the drill's)"


def test_every_route_needs_the_drill_s_token(bus: DrillBus, server: ServerHandle) -> None:
    """Whoever reaches the port (another local user, another seat's attendee) reads and acts on
    nothing without the token: the POSTs, the stream and /status are 401, the root a page that
    asks for the token and tells nothing of the drill."""
    seen: list[Request] = []
    bus.on_request(lambda req, data: seen.append(req) or "ok")
    assert server.url == server.root + f"responder/{server.token}/"
    root, wrong = server.root, server.root + "responder/" + "A" * 24 + "/"
    for base in (root, wrong, root + "responder/", root + f"responder/{server.token[:-1]}/"):
        for path in ("ack", "hint", "give-up"):
            r = httpx.post(base + path, headers={"X-Gameday": "1"})
            assert (r.status_code, r.json()) == (401, {"message": REFUSED}), base + path
        for path in ("events", "status"):
            r = httpx.get(base + path, timeout=5)
            assert (r.status_code, r.json()) == (401, {"message": REFUSED}), base + path
    assert seen == []
    page = httpx.get(root, headers={"Accept": "text/html"})
    assert page.status_code == 401 and "needs its token" in page.text
    assert "head-only-restart" not in page.text and "Head restarted alone" not in page.text
    assert httpx.get(wrong, headers={"Accept": "text/html"}).status_code == 401
    # with it, all of it
    assert httpx.get(server.url + "status").status_code == 200
    assert httpx.post(server.url + "ack", headers={"X-Gameday": "1"}).json() == {"message": "ok"}
    assert seen == [Request.ACK]


def test_another_seat_s_token_is_refused() -> None:
    """Two seats' pages, each with the token the workshop gave it: neither opens with the
    other's."""
    one, two = "seat1-" + "a" * 20, "seat2-" + "b" * 20
    buses = [DrillBus(status()), DrillBus(status())]
    seats = [start_server(buses[0], token=one), start_server(buses[1], token=two)]
    try:
        assert seats[0].url.endswith(f"/responder/{one}/")
        for bus in buses:
            bus.on_request(lambda req, data: "acted")
        for mine, theirs in ((seats[0], two), (seats[1], one)):
            other = mine.root + f"responder/{theirs}/"
            assert httpx.post(other + "ack", headers={"X-Gameday": "1"}).status_code == 401
            assert httpx.get(other + "status").status_code == 401
            assert httpx.post(mine.url + "ack", headers={"X-Gameday": "1"}).status_code == 200
    finally:
        for s in seats:
            s.stop()


def test_tokens_are_compared_in_constant_time(
    server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner.drill.server as mod

    compared: list[tuple[bytes, bytes]] = []
    real = mod.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(mod.hmac, "compare_digest", spy)
    assert httpx.get(server.url + "status").status_code == 200
    assert httpx.get(server.root + "responder/" + "z" * 24 + "/status").status_code == 401
    assert compared == [
        (server.token.encode(), server.token.encode()),
        (b"z" * 24, server.token.encode()),
    ]


def test_a_page_on_another_address_is_named_as_browsers_reach_it() -> None:
    """--listen: an address of one interface (127.0.0.2 stands for a LAN address here), and the
    name the cards give: the page's address uses it, its Host is accepted, any other refused."""
    bus = DrillBus(status())
    handle = start_server(bus, host="127.0.0.2", public_name="Seat-Host.example")
    try:
        port = handle.root.rsplit(":", 1)[1].strip("/")
        assert handle.root == f"http://seat-host.example:{port}/"
        direct = f"http://127.0.0.2:{port}/responder/{handle.token}/status"
        assert httpx.get(direct).status_code == 200
        named = httpx.get(direct, headers={"Host": f"seat-host.example:{port}"})
        assert named.status_code == 200
        assert httpx.get(direct, headers={"Host": "evil.example"}).status_code == 400
        with pytest.raises(httpx.ConnectError):  # not on 127.0.0.1
            httpx.get(f"http://127.0.0.1:{port}/")
    finally:
        handle.stop()
