"""The API server process's serving half: vLLM's OpenAI-compatible routes on uvicorn.

Generation goes to the engine-core process over a pipe. If that process dies, the server does
what vLLM does: logs the engine-dead errors, answers /health with 503 and requests with 500, shuts
uvicorn down gracefully and exits 0 (vLLM issue 48966) unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from labengine.logs import VllmLog
from labengine.textgen import chat_prompt_tokens, count_tokens
from labengine.wording import Era


@dataclass
class ServerState:
    era: Era
    served_name: str
    model_root: str
    max_model_len: int
    kv_tokens: int
    conn: Connection
    log: VllmLog
    keep_alive_on_death: bool
    stats_interval_s: float
    dead: bool = False
    queues: dict[str, asyncio.Queue[tuple[Any, ...]]] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    server: uvicorn.Server | None = None


def _error(status: int, message: str, etype: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": etype, "param": None, "code": status}},
        status_code=status,
    )


def build_app(st: ServerState) -> Starlette:
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    running = Gauge(
        "vllm:num_requests_running", "Requests in model execution batches.", labels, registry=reg
    )
    waiting = Gauge(
        "vllm:num_requests_waiting", "Requests waiting to be processed.", labels, registry=reg
    )
    kv_usage = Gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        labels,
        registry=reg,
    )
    prompt_tokens = Counter(
        "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg
    )
    gen_tokens = Counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=reg
    )
    success = Counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [*labels, "finished_reason"],
        registry=reg,
    )
    lv = {"model_name": st.served_name, "engine": "0"}
    for g in (running, waiting, kv_usage):
        g.labels(**lv).set(0)
    counters = {"prompt": 0, "gen": 0}

    async def generate(prompt: str, n_prompt: int, max_tokens: int) -> AsyncIterator[Any]:
        rid = f"req-{next(st.ids)}"
        q: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        st.queues[rid] = q
        running.labels(**lv).inc()
        kv_usage.labels(**lv).set(min(1.0, (n_prompt + max_tokens) / max(st.kv_tokens, 1)))
        try:
            st.conn.send(("gen", rid, prompt, n_prompt, max_tokens))
            while True:
                item = await q.get()
                if item[0] == "dead":
                    raise EngineDead
                yield item
                if item[0] == "end":
                    prompt_tokens.labels(**lv).inc(n_prompt)
                    gen_tokens.labels(**lv).inc(item[3])
                    success.labels(**lv, finished_reason=item[2]).inc()
                    counters["prompt"] += n_prompt
                    counters["gen"] += item[3]
                    return
        finally:
            st.queues.pop(rid, None)
            running.labels(**lv).dec()
            if not st.queues:
                kv_usage.labels(**lv).set(0)

    def check_request(body: dict[str, Any], n_prompt: int) -> tuple[int, JSONResponse | None]:
        model = body.get("model", st.served_name)
        if model not in (st.served_name, st.model_root):
            return 0, _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if max_tokens is None:
            max_tokens = max(st.max_model_len - n_prompt, 1)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return 0, _error(
                400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError"
            )
        if n_prompt + max_tokens > st.max_model_len:
            return 0, _error(
                400,
                f"This model's maximum context length is {st.max_model_len} tokens. However, you "
                f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion.",
                "BadRequestError",
            )
        return max_tokens, None

    async def completions_common(request: Request, chat: bool) -> Response:
        if st.dead:
            return _error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "Invalid JSON body", "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "Request body must be a JSON object", "BadRequestError")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return _error(400, "messages: Field required", "BadRequestError")
            prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            n_prompt = chat_prompt_tokens([m for m in messages if isinstance(m, dict)])
        else:
            raw = body.get("prompt")
            if not isinstance(raw, str):
                return _error(400, "prompt: Field required", "BadRequestError")
            prompt, n_prompt = raw, count_tokens(raw)
        max_tokens, err = check_request(body, n_prompt)
        if err is not None:
            return err
        created = int(time.time())
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{next(st.ids):032x}"
        obj = "chat.completion" if chat else "text_completion"

        def choice(text: str, reason: str | None, delta: bool) -> dict[str, Any]:
            if chat:
                key = "delta" if delta else "message"
                return {
                    "index": 0,
                    key: {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": reason,
                    "stop_reason": None,
                }
            return {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }

        if body.get("stream"):

            async def sse() -> AsyncIterator[bytes]:
                try:
                    async for item in generate(prompt, n_prompt, max_tokens):
                        if item[0] == "tok":
                            chunk = {
                                "id": cid,
                                "object": f"{obj}.chunk",
                                "created": created,
                                "model": st.served_name,
                                "choices": [choice(item[2], None, True)],
                            }
                        else:
                            chunk = {
                                "id": cid,
                                "object": f"{obj}.chunk",
                                "created": created,
                                "model": st.served_name,
                                "choices": [choice("", item[2], True)],
                            }
                        yield f"data: {json.dumps(chunk)}\n\n".encode()
                except EngineDead:
                    err = {
                        "error": {
                            "message": "EngineCore encountered an issue.",
                            "type": "InternalServerError",
                            "code": 500,
                        }
                    }
                    yield f"data: {json.dumps(err)}\n\n".encode()
                yield b"data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")

        parts: list[str] = []
        reason = "stop"
        n_out = 0
        try:
            async for item in generate(prompt, n_prompt, max_tokens):
                if item[0] == "tok":
                    parts.append(item[2])
                else:
                    reason, n_out = item[2], item[3]
        except EngineDead:
            return _error(
                500,
                "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                "InternalServerError",
            )
        return JSONResponse(
            {
                "id": cid,
                "object": obj,
                "created": created,
                "model": st.served_name,
                "choices": [choice("".join(parts), reason, False)],
                "usage": {
                    "prompt_tokens": n_prompt,
                    "completion_tokens": n_out,
                    "total_tokens": n_prompt + n_out,
                },
            }
        )

    async def health(_: Request) -> Response:
        return Response(status_code=503 if st.dead else 200)

    async def models(_: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": st.served_name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "vllm",
                        "root": st.model_root,
                        "parent": None,
                        "max_model_len": st.max_model_len,
                    }
                ],
            }
        )

    async def version(_: Request) -> Response:
        return JSONResponse({"version": st.era.version})

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(reg), media_type="text/plain; version=0.0.4")

    async def chat(request: Request) -> Response:
        return await completions_common(request, True)

    async def comp(request: Request) -> Response:
        return await completions_common(request, False)

    async def stats_loop() -> None:
        last = dict(counters)
        while True:
            await asyncio.sleep(st.stats_interval_s)
            dt = st.stats_interval_s
            p = (counters["prompt"] - last["prompt"]) / dt
            g = (counters["gen"] - last["gen"]) / dt
            last = dict(counters)
            if p or g or st.queues:
                st.log.info(
                    "loggers.py:127",
                    f"Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation "
                    f"throughput: {g:.1f} tokens/s, Running: {len(st.queues)} reqs, Waiting: 0 "
                    f"reqs, GPU KV cache usage: {kv_usage.labels(**lv)._value.get() * 100:.1f}%, "
                    "Prefix cache hit rate: 0.0%",
                )

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", comp, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.stats_task = stats_loop
    return app


class EngineDead(Exception):
    pass


def _on_engine_output(st: ServerState) -> None:
    try:
        item = st.conn.recv()
    except (EOFError, OSError):
        _engine_died(st)
        return
    q = st.queues.get(item[1])
    if q is not None:
        q.put_nowait(item)


def _engine_died(st: ServerState) -> None:
    loop = asyncio.get_running_loop()
    loop.remove_reader(st.conn.fileno())
    if st.dead:
        return
    st.dead = True
    if st.era is Era.V0_19:
        st.log.error(
            "core_client.py:564",
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        )
    st.log.error("async_llm.py:480", "AsyncLLM output_handler failed.")
    st.log.traceback(
        [
            (
                "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py",
                439,
                "output_handler",
                "outputs = await engine_core.get_output_async()",
            )
        ],
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    )
    for q in st.queues.values():
        q.put_nowait(("dead",))
    if not st.keep_alive_on_death and st.server is not None:
        st.server.should_exit = True


class _UvicornFormatter(logging.Formatter):
    """uvicorn's own lines (`INFO:     Started server process [1]`) behind vLLM's prefix."""

    def __init__(self, log: VllmLog) -> None:
        super().__init__()
        self.log = log

    def format(self, record: logging.LogRecord) -> str:
        level = (record.levelname + ":").ljust(9)
        return "\n".join(
            self.log.prefix + level + " " + line for line in record.getMessage().splitlines()
        )


def serve(st: ServerState, sock: socket.socket, host: str, port: int) -> None:
    app = build_app(st)
    handler = logging.StreamHandler(st.log.stream)
    handler.setFormatter(_UvicornFormatter(st.log))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.propagate = False
        lg.setLevel(logging.INFO)
    config = uvicorn.Config(
        app, log_config=None, access_log=True, lifespan="on", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    st.server = server

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(st.conn.fileno(), _on_engine_output, st)
        stats = asyncio.create_task(app.state.stats_task())
        await server.serve(sockets=[sock])
        stats.cancel()

    asyncio.run(main())
