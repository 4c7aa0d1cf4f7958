"""The load generator (runner.run.traffic): what it sends, how it records each outcome, its
schedule, and that it cannot outlive the runner's process."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from runner.run.traffic import Outcome, Plan, Traffic, body_of
from runner.spec.workload import Load

ROOT = Path(__file__).resolve().parents[4]

WHOLE = {"choices": [{"text": "hi", "finish_reason": "stop"}], "usage": {"completion_tokens": 3}}


def _sse(*events: object) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def _load(**kw: object) -> Load:
    return Load.model_validate({"rate": 200, "max_requests": 6, **kw})


def _run(spec: Load, handler: Callable[[httpx.Request], httpx.Response], lab_s: float = 5.0):
    t = Traffic("http://127.0.0.1:1", spec, lab_s, transport=httpx.MockTransport(handler))
    t.start()
    deadline = time.monotonic() + 10
    while len(t.sent()) < spec.max_requests and time.monotonic() < deadline:
        time.sleep(0.01)
    t.stop()
    assert not t.running and t.error is None
    return t.sent()


def test_every_request_is_recorded_with_its_outcome() -> None:
    def answer(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content)
        if body.get("stream"):
            chunk = {"choices": [{"delta": {"content": "x"}}]}
            usage = {"choices": [], "usage": {"completion_tokens": 2}}
            return httpx.Response(200, content=_sse(chunk, usage))
        return httpx.Response(200, json=WHOLE)

    mix = [{"api": "chat", "stream": True}, {"api": "completions"}]
    sent = _run(_load(mix=mix, seed=3), answer)
    assert len(sent) == 6 and all(s.outcome is Outcome.OK for s in sent)
    streamed = [s for s in sent if s.stream]
    assert streamed and all(s.ttft_s is not None and s.tokens == 2 for s in streamed)
    assert all(s.tokens == 3 and s.ttft_s is None for s in sent if not s.stream)
    assert all(s.intended <= s.start <= s.end for s in sent)


@pytest.mark.parametrize(
    ("fails", "outcome"),
    [
        (httpx.ConnectError("refused"), Outcome.REFUSED),
        (httpx.ReadError("reset by peer"), Outcome.RESET),
        (httpx.RemoteProtocolError("closed mid-answer"), Outcome.RESET),
        (httpx.ReadTimeout("slow"), Outcome.TIMEOUT),
        (httpx.Response(503, json={"error": "down"}), Outcome.HTTP_ERROR),
        (httpx.Response(200, content=_sse({"error": {"code": 500}})), Outcome.STREAM_ERROR),
        (httpx.Response(200, content=b"data: {}\n\n"), Outcome.STREAM_ERROR),  # no [DONE]
        (httpx.Response(200, content=b"not json"), Outcome.BAD_ANSWER),
    ],
)
def test_each_way_a_request_fails_is_named(fails: object, outcome: Outcome) -> None:
    def answer(req: httpx.Request) -> httpx.Response:
        if isinstance(fails, Exception):
            raise type(fails)(str(fails), request=req)
        assert isinstance(fails, httpx.Response)
        return fails

    stream = outcome is Outcome.STREAM_ERROR
    sent = _run(_load(mix=[{"api": "chat", "stream": stream}], max_requests=2), answer)
    assert [s.outcome for s in sent] == [outcome, outcome]
    if outcome is Outcome.HTTP_ERROR:
        assert sent[0].status == 503


def test_a_request_that_takes_longer_than_its_timeout_is_a_timeout() -> None:
    async def slow(req: httpx.Request) -> httpx.Response:
        import asyncio

        await asyncio.sleep(5)
        return httpx.Response(200, json=WHOLE)

    sent = _run(_load(max_requests=1, timeout_s=0.2), slow)  # type: ignore[arg-type]
    assert [s.outcome for s in sent] == [Outcome.TIMEOUT]
    assert 0.15 < sent[0].latency_s < 2


def test_open_loop_latency_counts_from_the_intended_send_time() -> None:
    """A server that answers one request at a time for 0.1 s: requests due every 10 ms queue
    behind it, and each one's latency includes its wait (coordinated omission)."""
    gate = threading.Lock()

    def one_at_a_time(req: httpx.Request) -> httpx.Response:
        with gate:
            time.sleep(0.1)
        return httpx.Response(200, json=WHOLE)

    sent = _run(_load(rate=100, max_requests=5), one_at_a_time)
    assert len(sent) == 5
    # the intended times are the schedule, 10 ms apart, whatever the server did
    gaps = [b.intended - a.intended for a, b in itertools.pairwise(sent)]
    assert all(abs(g - 0.01) < 1e-6 for g in gaps)
    assert max(s.latency_s for s in sent) >= 0.3  # the last waited behind the others


def test_the_load_stops_by_itself_at_max_s() -> None:
    spec = _load(max_requests=100_000, rate=50)
    t = Traffic(
        "http://x",
        spec,
        0.3,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=WHOLE)),
    )
    t.start()
    t._thread.join(5)  # type: ignore[union-attr]
    assert not t.running
    assert 5 <= len(t.sent()) <= 20


def test_closed_loop_keeps_its_users_one_request_each() -> None:
    inflight, most = [0], [0]
    lock = threading.Lock()

    def answer(req: httpx.Request) -> httpx.Response:
        with lock:
            inflight[0] += 1
            most[0] = max(most[0], inflight[0])
        time.sleep(0.01)
        with lock:
            inflight[0] -= 1
        return httpx.Response(200, json=WHOLE)

    spec = Load.model_validate({"concurrency": 3, "max_requests": 30})
    sent = _run(spec, answer)
    assert len(sent) == 30 and most[0] <= 3
    assert all(s.intended == s.start or abs(s.start - s.intended) < 0.01 for s in sent)


def test_the_mix_and_lengths_are_the_seeds() -> None:
    spec = _load(
        mix=[{"api": "chat", "weight": 3}, {"api": "completions", "stream": True}],
        prompt_tokens={"min": 2, "max": 9},
        output_tokens={"min": 1, "max": 5},
        seed=11,
    )

    def draws(s: Load) -> list[tuple[str, bool, int, int]]:
        plan = Plan(s)
        return [
            (p.kind.api.value, p.kind.stream, p.prompt_tokens, p.max_tokens)
            for p in (plan.take() for _ in range(50))
        ]

    assert draws(spec) == draws(spec)
    assert draws(spec) != draws(spec.model_copy(update={"seed": 12}))
    got = draws(spec)
    assert {a for a, *_ in got} == {"chat", "completions"}
    assert all(2 <= n <= 9 and 1 <= m <= 5 for *_, n, m in got)
    p = Plan(spec).take()
    body = body_of(p)
    assert body["max_tokens"] == p.max_tokens


def test_the_address_is_the_labs_at_each_request() -> None:
    """A pod re-created by a change has another IP: the load follows the lab's address, and a
    moment without one is the request's outcome, not the generator's end."""
    from runner.errors import LabError

    hosts: list[str] = []
    addresses = iter(["http://10.0.0.1:8000", None, "http://10.0.0.2:8000"])

    def url() -> str:
        a = next(addresses, "http://10.0.0.2:8000")
        if a is None:
            raise LabError("node1: its pod has no IP yet")
        return a

    def answer(req: httpx.Request) -> httpx.Response:
        hosts.append(req.url.host)
        return httpx.Response(200, json=WHOLE)

    t = Traffic(url, _load(max_requests=3, rate=50), 5.0, transport=httpx.MockTransport(answer))
    t.start()
    deadline = time.monotonic() + 10
    while len(t.sent()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    t.stop()
    assert [s.outcome for s in t.sent()] == [Outcome.OK, Outcome.NO_ADDRESS, Outcome.OK]
    assert hosts == ["10.0.0.1", "10.0.0.2"]
