"""vLLM's OpenAI-compatible routes: health, models, version, metrics and the two completions
endpoints (whole or streamed as server-sent events), with vLLM's error bodies."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from labengine.server.metrics import CONTENT_TYPE
from labengine.server.state import EngineDead, ServerState, generate
from labengine.textgen import chat_prompt_tokens, count_tokens

ENGINE_ERROR = "EngineCore encountered an issue. See stack trace (above) for the root cause."

# (path, method) in the order vLLM's launcher lists them at start-up
ROUTES = (
    ("/health", "GET"),
    ("/metrics", "GET"),
    ("/v1/models", "GET"),
    ("/version", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
)
# vLLM's development routes (`VLLM_SERVER_DEV_MODE=1`): sleep mode, as RLHF trainers drive it to
# lend the GPU to a training step between rollouts
DEV_ROUTES = (
    ("/sleep", "POST"),
    ("/wake_up", "POST"),
    ("/is_sleeping", "GET"),
)
DEV_MODE_WARNING = (
    "SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!"
)
# what a request gets while the scheduler is paused (vllm/v1/engine/core.py, 0.33)
PAUSED = "Generation is paused. Please retry after it resumes."
SLEEP_TAGS = "{'weights', 'kv_cache'}"


def error(status: int, message: str, etype: str) -> JSONResponse:
    """vLLM's (OpenAI's) error body."""
    return JSONResponse(
        {"error": {"message": message, "type": etype, "param": None, "code": status}},
        status_code=status,
    )


@dataclass(frozen=True)
class Prompt:
    """A valid completion request: what goes to the engine core."""

    text: str
    tokens: int
    max_tokens: int
    stream: bool


def prompt_of(body: dict[str, Any], chat: bool) -> tuple[str, int] | JSONResponse:
    """The prompt text and its token count (chat: with the template's overhead)."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return error(400, "messages: Field required", "BadRequestError")
        dicts = [m for m in messages if isinstance(m, dict)]
        return "\n".join(str(m.get("content", "")) for m in dicts), chat_prompt_tokens(dicts)
    raw = body.get("prompt")
    if not isinstance(raw, str):
        return error(400, "prompt: Field required", "BadRequestError")
    return raw, count_tokens(raw)


def check_request(st: ServerState, body: dict[str, Any], n_prompt: int) -> int | JSONResponse:
    """The model exists and the request fits the context window: its max_tokens (the rest of
    the window when the request names none), or vLLM's error."""
    model = body.get("model", st.served_name)
    if model not in (st.served_name, st.model_root):
        return error(404, f"The model `{model}` does not exist.", "NotFoundError")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    if max_tokens is None:
        max_tokens = max(st.max_model_len - n_prompt, 1)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return error(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError")
    if n_prompt + max_tokens > st.max_model_len:
        return error(
            400,
            f"This model's maximum context length is {st.max_model_len} tokens. However, you "
            f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "completion.",
            "BadRequestError",
        )
    return max_tokens


async def read_request(st: ServerState, request: Request, chat: bool) -> Prompt | JSONResponse:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error(400, "Invalid JSON body", "BadRequestError")
    if not isinstance(body, dict):
        return error(400, "Request body must be a JSON object", "BadRequestError")
    prompt = prompt_of(body, chat)
    if isinstance(prompt, JSONResponse):
        return prompt
    text, n_prompt = prompt
    max_tokens = check_request(st, body, n_prompt)
    if isinstance(max_tokens, JSONResponse):
        return max_tokens
    return Prompt(text, n_prompt, max_tokens, bool(body.get("stream")))


@dataclass(frozen=True)
class Completion:
    """The response bodies of one completion: chat or text, whole or in chunks."""

    chat: bool
    id: str
    created: int
    model: str

    @property
    def object(self) -> str:
        return "chat.completion" if self.chat else "text_completion"

    def choice(self, text: str, reason: str | None, delta: bool) -> dict[str, Any]:
        if self.chat:
            content = {"role": "assistant", "content": text}
            head: dict[str, Any] = {"index": 0, "delta" if delta else "message": content}
        else:
            head = {"index": 0, "text": text}
        return {**head, "logprobs": None, "finish_reason": reason, "stop_reason": None}

    def chunk(self, text: str, reason: str | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": f"{self.object}.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [self.choice(text, reason, True)],
        }

    def whole(self, text: str, reason: str, n_prompt: int, n_out: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": [self.choice(text, reason, False)],
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_out,
                "total_tokens": n_prompt + n_out,
            },
        }


async def _events(st: ServerState, p: Prompt, out: Completion) -> AsyncIterator[bytes]:
    """Server-sent events: a chunk per token, a last chunk with the finish reason, [DONE]."""
    try:
        async for item in generate(st, p.text, p.tokens, p.max_tokens):
            chunk = out.chunk(item[2], None) if item[0] == "tok" else out.chunk("", item[2])
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


async def _whole(st: ServerState, p: Prompt, out: Completion) -> Response:
    parts: list[str] = []
    reason, n_out = "stop", 0
    try:
        async for item in generate(st, p.text, p.tokens, p.max_tokens):
            if item[0] == "tok":
                parts.append(item[2])
            else:
                reason, n_out = item[2], item[3]
    except EngineDead:
        return error(500, ENGINE_ERROR, "InternalServerError")
    return JSONResponse(out.whole("".join(parts), reason, p.tokens, n_out))


class Api:
    """The endpoints over one server state (bound methods, as Starlette's routes take them)."""

    def __init__(self, st: ServerState) -> None:
        self.st = st

    async def health(self, _: Request) -> Response:
        return Response(status_code=503 if self.st.dead else 200)

    async def models(self, _: Request) -> Response:
        model = {
            "id": self.st.served_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.st.model_root,
            "parent": None,
            "max_model_len": self.st.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def version(self, _: Request) -> Response:
        return JSONResponse({"version": self.st.era.version})

    async def metrics(self, _: Request) -> Response:
        return Response(self.st.metrics.exposition(), media_type=CONTENT_TYPE)

    async def chat(self, request: Request) -> Response:
        return await self._completions(request, True)

    async def completions(self, request: Request) -> Response:
        return await self._completions(request, False)

    async def _completions(self, request: Request, chat: bool) -> Response:
        st = self.st
        if st.dead:
            return error(500, ENGINE_ERROR, "InternalServerError")
        p = await read_request(st, request, chat)
        if isinstance(p, JSONResponse):
            return p
        if st.sleeping is not None:
            return error(503, PAUSED, "ServiceUnavailableError")
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{next(st.ids):032x}"
        out = Completion(chat, cid, int(time.time()), st.served_name)
        if p.stream:
            return StreamingResponse(_events(st, p, out), media_type="text/event-stream")
        return await _whole(st, p, out)

    async def sleep(self, request: Request) -> Response:
        """Pause the scheduler, then (level 1 and 2) release the GPU memory. The GPU-less engine
        holds no memory to release: only the pause, which is what clients see, is modelled."""
        raw = request.query_params.get("level", "1")
        if not raw.isdigit() or not 0 <= int(raw) <= 2:
            return error(400, f"level: Input should be 0, 1 or 2, got {raw!r}", "BadRequestError")
        level = int(raw)
        if self.st.sleeping is None:
            self.st.sleeping = level
            if level >= 1:
                took = 0.05 / max(self.st.time_scale, 1.0)
                self.st.log.info("abstract.py:408", f"It took {took:.6f} seconds to fall asleep.")
        elif level >= 1:
            self.st.log.warning("abstract.py:402", "Executor is already sleeping.")
        return JSONResponse({"status": "sleeping", "level": level})

    async def wake_up(self, request: Request) -> Response:
        tags = request.query_params.getlist("tags") or None
        self.st.log.info("api_router.py:50", f"wake up the engine with tags: {tags}")
        if self.st.sleeping is None:
            self.st.log.warning("abstract.py:414", "Executor is not sleeping.")
        elif self.st.sleeping >= 1:
            took = 0.1 / max(self.st.time_scale, 1.0)
            self.st.log.info(
                "abstract.py:426", f"It took {took:.6f} seconds to wake up tags {SLEEP_TAGS}."
            )
        self.st.sleeping = None
        return JSONResponse({"status": "awake", "tags": tags})

    async def is_sleeping(self, _: Request) -> Response:
        return JSONResponse({"is_sleeping": self.st.sleeping is not None})

    def routes(self) -> list[Route]:
        dev = {"/sleep": self.sleep, "/wake_up": self.wake_up, "/is_sleeping": self.is_sleeping}
        extra = [Route(p, dev[p], methods=[m]) for p, m in DEV_ROUTES] if self.st.dev_mode else []
        endpoints = {
            "/health": self.health,
            "/metrics": self.metrics,
            "/v1/models": self.models,
            "/version": self.version,
            "/v1/chat/completions": self.chat,
            "/v1/completions": self.completions,
        }
        return [Route(path, endpoints[path], methods=[method]) for path, method in ROUTES] + extra
