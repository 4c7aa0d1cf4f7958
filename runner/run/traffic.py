"""The users' traffic during a run (the scenario's `load` section): an OpenAI-compatible client
(httpx, async) that sends the seeded mix of requests to one node of the lab and records every
one of them.

The generator runs in a thread of the runner's own process, on its own asyncio event loop: no
process of its own, so nothing of it can outlive the runner, a `kill -9` of the runner
included; the run stops it at its end whatever happens (`Traffic.stop`), and it stops by itself
at `max_requests` or `max_s`.

Open loop (`rate`): request i is due at start + i / rate whatever earlier requests are doing,
and its latency and time to first token count from that intended send time, so that a server
that stalls is charged for the requests users would have sent meanwhile (coordinated omission).
Closed loop (`concurrency`): each user sends its next request when its last one answered; the
intended time is the send time.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from runner.errors import GamedayError
from runner.spec.workload import Api, Load, RequestKind

# requests in flight at most: past it, an open loop sends late (each still timed from its due
# time) rather than pile up tasks that all wait on the connection pool, where every release
# wakes the waiters in turn and the generator chokes on its own queue (bench/load_ceiling.py)
MAX_IN_FLIGHT = 256
DRAIN_S = 5.0  # wall seconds in-flight requests are given to finish once the load is stopped
JOIN_S = 10.0
WORD = "hello"  # one token in the stand-in's and the tiny real models' tokenizers


class Outcome(enum.StrEnum):
    OK = "ok"
    HTTP_ERROR = "http_error"  # an answer with an error status
    STREAM_ERROR = "stream_error"  # 200, then an error event or no [DONE] in the stream
    TIMEOUT = "timeout"  # no whole answer within timeout_s
    REFUSED = "refused"  # the connection could not be made (nothing listening)
    RESET = "reset"  # the connection broke mid-request
    TRANSPORT = "transport_error"  # any other failure of the connection
    BAD_ANSWER = "bad_answer"  # 200 with a body that is not the API's
    NO_ADDRESS = "no_address"  # the lab had no address for the node (a pod not scheduled yet)


@dataclass(frozen=True)
class Sent:
    """One request: its times in epoch seconds, what it asked and what came of it."""

    index: int
    api: Api
    stream: bool
    prompt_tokens: int
    max_tokens: int
    intended: float  # when it was due (open loop) or sent (closed loop)
    start: float
    end: float
    first_token: float | None  # a streamed request's first token
    tokens: int
    outcome: Outcome
    status: int | None = None

    @property
    def failed(self) -> bool:
        return self.outcome is not Outcome.OK

    @property
    def latency_s(self) -> float:
        return self.end - self.intended

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.intended


@dataclass(frozen=True)
class Planned:
    index: int
    kind: RequestKind
    prompt_tokens: int
    max_tokens: int


class Plan:
    """The seeded draws: request i's kind and lengths, drawn in index order."""

    def __init__(self, spec: Load) -> None:
        self.spec = spec
        self._rng = random.Random(spec.seed)
        self._weights = [k.weight for k in spec.mix]
        self._next = 0

    @property
    def taken(self) -> int:
        return self._next

    def take(self) -> Planned:
        s, rng = self.spec, self._rng
        kind = rng.choices(s.mix, weights=self._weights)[0]
        n_in = rng.randint(s.prompt_tokens.min, s.prompt_tokens.max)
        n_out = rng.randint(s.output_tokens.min, s.output_tokens.max)
        p = Planned(self._next, kind, n_in, n_out)
        self._next += 1
        return p


def body_of(p: Planned) -> dict[str, Any]:
    prompt = " ".join([WORD] * p.prompt_tokens)
    body: dict[str, Any] = {"max_tokens": p.max_tokens, "temperature": 0.0}
    if p.kind.api is Api.CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if p.kind.stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


PATHS = {Api.CHAT: "/v1/chat/completions", Api.COMPLETIONS: "/v1/completions"}


@dataclass
class _Answer:
    outcome: Outcome = Outcome.OK
    status: int | None = None
    first_token: float | None = None
    tokens: int = 0


class Traffic:
    """The load against `base_url`, for at most `max_lab_s` wall seconds (the spec's `max_s`
    converted by the lab's time scale). `base_url` is a URL, or what gives the node's URL as the
    lab has it at each request: a pod re-created by a change has another address (its lab
    error, none at the moment, is the request's outcome `no_address`)."""

    def __init__(
        self,
        base_url: str | Callable[[], str],
        spec: Load,
        max_lab_s: float,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base = base_url if callable(base_url) else lambda: base_url
        self.spec = spec
        self.max_lab_s = max_lab_s
        self._transport = transport
        self._plan = Plan(spec)
        self._sent: list[Sent] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._epoch0 = 0.0
        self._mono0 = 0.0
        self.unfinished = 0  # in flight when the load was stopped and cut off after DRAIN_S
        self.error: BaseException | None = None  # what broke the generator itself, if anything

    # ---- the clock: monotonic for intervals, stamped as epoch seconds ----
    def _now(self) -> float:
        return self._epoch0 + (time.monotonic() - self._mono0)

    @property
    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self._epoch0, UTC)

    def start(self) -> Traffic:
        self._epoch0, self._mono0 = time.time(), time.monotonic()
        self._thread = threading.Thread(target=self._run, name="gameday-load", daemon=True)
        self._thread.start()
        self._ready.wait(JOIN_S)
        return self

    def stop(self) -> None:
        """Stop sending; in-flight requests get DRAIN_S to finish. Safe to call twice."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(JOIN_S + DRAIN_S + self.spec.timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def count(self) -> int:
        """How many requests were answered (or failed) so far."""
        with self._lock:
            return len(self._sent)

    def sent(self) -> list[Sent]:
        with self._lock:
            return sorted(self._sent, key=lambda s: (s.intended, s.index))

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # the run reports it; the thread must not die silently
            self.error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=64)
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        # trust_env=False: a proxy from the environment must not see the lab's traffic
        async with httpx.AsyncClient(
            trust_env=False,
            timeout=httpx.Timeout(self.spec.timeout_s),
            limits=limits,
            transport=self._transport,
        ) as client:
            deadline = self._mono0 + self.max_lab_s
            tasks: set[asyncio.Task[None]] = set()
            if self.spec.rate is not None:
                await self._open_loop(client, self.spec.rate, deadline, tasks, slots)
            else:
                workers = [
                    asyncio.create_task(self._user(client, deadline))
                    for _ in range(self.spec.concurrency or 1)
                ]
                tasks.update(workers)
                await self._until(deadline)
            await self._drain(tasks)

    async def _until(self, deadline: float) -> bool:
        """Wait for the stop or the monotonic deadline; whether the load goes on."""
        assert self._stop is not None
        left = deadline - time.monotonic()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), left)
        return not self._stop.is_set() and time.monotonic() < deadline

    async def _open_loop(
        self,
        client: httpx.AsyncClient,
        rate: float,
        deadline: float,
        tasks: set[asyncio.Task[None]],
        slots: asyncio.Semaphore,
    ) -> None:
        for i in range(self.spec.max_requests):
            due = self._mono0 + i / rate
            if due >= deadline:
                return
            await self._until(due)
            await slots.acquire()  # a request's timeout bounds the wait
            if (self._stop is not None and self._stop.is_set()) or time.monotonic() >= deadline:
                slots.release()
                return
            t = asyncio.create_task(self._one(client, self._plan.take(), self._epoch_of(due)))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            t.add_done_callback(lambda _t: slots.release())
        await self._until(deadline)  # the count is reached: stay until stopped, sending nothing

    def _epoch_of(self, mono: float) -> float:
        return self._epoch0 + (mono - self._mono0)

    async def _user(self, client: httpx.AsyncClient, deadline: float) -> None:
        assert self._stop is not None
        while not self._stop.is_set() and time.monotonic() < deadline:
            if self._plan.taken >= self.spec.max_requests:
                return
            planned = self._plan.take()
            await self._one(client, planned, self._now())

    async def _drain(self, tasks: set[asyncio.Task[None]]) -> None:
        if not tasks:
            return
        _, pending = await asyncio.wait(set(tasks), timeout=DRAIN_S)
        self.unfinished = len(pending)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _one(self, client: httpx.AsyncClient, p: Planned, intended: float) -> None:
        start = self._now()
        answer = _Answer()
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                await self._send(client, p, answer)
        except TimeoutError:
            answer.outcome = Outcome.TIMEOUT
        except httpx.TimeoutException:
            answer.outcome = Outcome.TIMEOUT
        except httpx.ConnectError:
            answer.outcome = Outcome.REFUSED
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
            answer.outcome = Outcome.RESET
        except httpx.HTTPError:
            answer.outcome = Outcome.TRANSPORT
        except (ValueError, KeyError, TypeError, AttributeError):
            answer.outcome = Outcome.BAD_ANSWER
        except GamedayError:
            answer.outcome = Outcome.NO_ADDRESS
        sent = Sent(
            index=p.index,
            api=p.kind.api,
            stream=p.kind.stream,
            prompt_tokens=p.prompt_tokens,
            max_tokens=p.max_tokens,
            intended=intended,
            start=start,
            end=self._now(),
            first_token=answer.first_token,
            tokens=answer.tokens,
            outcome=answer.outcome,
            status=answer.status,
        )
        with self._lock:
            self._sent.append(sent)

    async def _send(self, client: httpx.AsyncClient, p: Planned, a: _Answer) -> None:
        url = self._base().rstrip("/") + PATHS[p.kind.api]
        if not p.kind.stream:
            r = await client.post(url, json=body_of(p))
            a.status = r.status_code
            if r.status_code != 200:
                a.outcome = Outcome.HTTP_ERROR
                return
            a.tokens = int(r.json()["usage"]["completion_tokens"])
            return
        async with client.stream("POST", url, json=body_of(p)) as r:
            a.status = r.status_code
            if r.status_code != 200:
                await r.aread()
                a.outcome = Outcome.HTTP_ERROR
                return
            a.outcome = Outcome.STREAM_ERROR  # until [DONE] without an error event
            errored = False
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                if data == "[DONE]":
                    a.outcome = Outcome.STREAM_ERROR if errored else Outcome.OK
                    return
                event = json.loads(data)
                if "error" in event:
                    errored = True
                    continue
                if event.get("usage"):
                    a.tokens = int(event["usage"]["completion_tokens"])
                if a.first_token is None and any(_text(c) for c in event.get("choices", [])):
                    a.first_token = self._now()


def _text(choice: dict[str, Any]) -> str:
    return str(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
