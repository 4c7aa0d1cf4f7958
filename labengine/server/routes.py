"""vLLM's OpenAI-compatible routes: health, models, version, metrics and the two completions
endpoints (whole or streamed as server-sent events), with vLLM's error bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from labengine import clock
from labengine.server.metrics import CONTENT_TYPE
from labengine.server.state import EngineDead, ServerState, generate
from labengine.sites import Site, where
from labengine.textgen import WORDS, chat_prompt_tokens, count_tokens, top_logprobs
from vllmfacts.kvtransfer import GENERATION_ERROR, request_failed
from vllmfacts.wording import NO_CHAT_TEMPLATE

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
# ModelConfig.max_logprobs and envs.VLLM_MAX_N_SEQUENCES, their defaults in vLLM 0.33
MAX_LOGPROBS = 20
MAX_N_SEQUENCES = 16384


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
    n: int = 1
    logprobs: int | None = None  # top-N per token (completions: `logprobs`; chat: `top_logprobs`)
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    kv_params: dict[str, Any] | None = None  # kv_transfer_params, for a KV connector


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


def unknown_model(st: ServerState, body: dict[str, Any]) -> JSONResponse | None:
    """vLLM's 404 for a model it does not serve (OpenAIServing._check_model), or None."""
    model = body.get("model", st.served_name)
    if model not in (st.served_name, st.model_root):
        return error(404, f"The model `{model}` does not exist.", "NotFoundError")
    return None


def check_request(st: ServerState, body: dict[str, Any], n_prompt: int) -> int | JSONResponse:
    """The model exists and the request fits the context window: its max_tokens (the rest of
    the window when the request names none), or vLLM's error."""
    unknown = unknown_model(st, body)
    if unknown is not None:
        return unknown
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
    if chat and not st.chat_template:
        # the model is checked first, then the conversation rendered with the template that
        # --chat-template or the tokenizer gives (vllm/renderers/hf.py:
        # safe_apply_chat_template): with none, ChatTemplateResolutionError, answered 400
        return unknown_model(st, body) or error(400, NO_CHAT_TEMPLATE, "BadRequestError")
    text, n_prompt = prompt
    max_tokens = check_request(st, body, n_prompt)
    if isinstance(max_tokens, JSONResponse):
        return max_tokens
    options = sampling_of(body, chat, st.max_logprobs, st.vocab_size)
    if isinstance(options, JSONResponse):
        return options
    n, logprobs = options
    stream_options = body.get("stream_options")
    include = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
    kv = body.get("kv_transfer_params")
    kv_params = kv if isinstance(kv, dict) else None
    stream = bool(body.get("stream"))
    return Prompt(text, n_prompt, max_tokens, stream, n, logprobs, include, kv_params)


def invalid(message: str, param: str | None, value: object = None) -> JSONResponse:
    """A VLLMValidationError as vLLM renders it: str(exc) names the parameter and value."""
    extras = [f"parameter={param}"] if param is not None else []
    if value is not None:
        extras.append(f"value={value}")
    text = f"{message} ({', '.join(extras)})" if extras else message
    body = {"error": {"message": text, "type": "BadRequestError", "param": param, "code": 400}}
    return JSONResponse(body, status_code=400)


def sampling_of(
    body: dict[str, Any], chat: bool, max_logprobs: int = MAX_LOGPROBS, vocab_size: int = 0
) -> tuple[int, int | None] | JSONResponse:
    """`n` and the number of top logprobs per token, checked as vLLM 0.33 checks them
    (chat_completion/protocol.py, completion/protocol.py check_logprobs, sampling_params.py
    _validate_logprobs: -1 stands for the whole vocabulary, in the request and in
    --max-logprobs)."""
    n = body.get("n", 1)
    n = 1 if n is None else n
    if not isinstance(n, int) or isinstance(n, bool):
        return invalid(f"n must be an int, but is of type {type(n)}", None)
    if n < 1:
        return invalid(f"n must be at least 1, got {n}.", None)
    if n > MAX_N_SEQUENCES:
        return invalid(
            f"n must be at most {MAX_N_SEQUENCES}, got {n}. To increase this limit, set the "
            "VLLM_MAX_N_SEQUENCES environment variable.",
            None,
        )
    if n > 1 and body.get("temperature") == 0:
        return invalid(f"n must be 1 when using greedy sampling, got {n}.", None)
    wanted = _logprobs_of(body, chat)
    if isinstance(wanted, JSONResponse):
        return wanted
    allowed = vocab_size if max_logprobs == -1 else max_logprobs
    asked = vocab_size if wanted == -1 else wanted
    if asked and asked > allowed:
        return invalid(
            f"Requested sample logprobs of {asked}, which is greater than max allowed: {allowed}",
            "logprobs",
            asked,
        )
    return n, asked


def _logprobs_of(body: dict[str, Any], chat: bool) -> int | JSONResponse | None:
    """The top-N the request asks for (-1: all), or vLLM's error for a bad value."""
    if chat:
        top = body.get("top_logprobs")
        if top is not None and not isinstance(top, int | float):
            return invalid("`top_logprobs` must be an integer.", "top_logprobs", top)
        if top is not None and top < 0 and top != -1:
            return invalid("`top_logprobs` must be a positive value or -1.", "top_logprobs", top)
        if top is not None and (top == -1 or top > 0) and not body.get("logprobs"):
            return invalid(
                "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
            )
        return int(top or 0) if body.get("logprobs") else None
    raw = body.get("logprobs")
    if not isinstance(raw, int) or isinstance(raw, bool):
        return None
    if raw < 0 and raw != -1:
        return invalid("`logprobs` must be a positive value or -1.", "logprobs", raw)
    return raw


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

    @property
    def chunk_object(self) -> str:
        # vLLM's CompletionStreamResponse keeps "text_completion"; chat chunks have their own
        return "chat.completion.chunk" if self.chat else "text_completion"

    def choice(
        self, index: int, text: str, reason: str | None, delta: bool, lp: Any = None
    ) -> dict[str, Any]:
        if self.chat:
            content = {"role": "assistant", "content": text}
            head: dict[str, Any] = {"index": index, "delta" if delta else "message": content}
        else:
            head = {"index": index, "text": text}
        return {**head, "logprobs": lp, "finish_reason": reason, "stop_reason": None}

    def chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.chunk_object,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }

    def usage_chunk(self, n_prompt: int, n_out: int) -> dict[str, Any]:
        """The last chunk with `stream_options.include_usage`: no choices, the usage (vLLM
        serialises it without its None fields, in UsageInfo's field order)."""
        usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + n_out}
        return {**self.chunk({}), "choices": [], "usage": {**usage, "completion_tokens": n_out}}

    def whole(self, choices: list[dict[str, Any]], n_prompt: int, n_out: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": n_prompt,
                "completion_tokens": n_out,
                "total_tokens": n_prompt + n_out,
            },
        }

    def logprobs(self, tokens: list[str], top: int, first: int, offset: int) -> Any:
        """vLLM's logprobs object for `tokens` (positions from `first` on, text offsets from
        `offset`): ChatCompletionLogProbs or CompletionLogProbs."""
        # the lab engine's vocabulary is its word list: a request for more (up to the model's
        # whole vocabulary, `logprobs: -1`) gets every word of it
        top = min(top, len(set(WORDS)))
        tops = [top_logprobs(self.model, first + i, t, top) for i, t in enumerate(tokens)]
        if self.chat:
            return {
                "content": [_chat_logprob(t, lps, top) for t, lps in zip(tokens, tops, strict=True)]
            }
        offsets = [offset + sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        return {
            "text_offset": offsets,
            "token_logprobs": [lps[0][1] for lps in tops],
            "tokens": tokens,
            "top_logprobs": [dict(lps) for lps in tops],
        }


def _entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode())}


def _chat_logprob(token: str, lps: list[tuple[str, float]], top: int) -> dict[str, Any]:
    return {**_entry(token, lps[0][1]), "top_logprobs": [_entry(t, v) for t, v in lps[:top]]}


async def _merged(st: ServerState, p: Prompt) -> AsyncIterator[tuple[int, tuple[Any, ...]]]:
    """The items of the request's `n` choices as the engine core sends them, with their index."""
    q: asyncio.Queue[tuple[int, tuple[Any, ...]] | BaseException | None] = asyncio.Queue()

    async def pump(index: int) -> None:
        try:
            async for item in generate(st, p.text, p.tokens, p.max_tokens, index, p.kv_params):
                await q.put((index, item))
            await q.put(None)
        except BaseException as e:  # the consumer re-raises it (EngineDead)
            await q.put(e)

    st.metrics.received(p.n, p.max_tokens)
    tasks = [asyncio.create_task(pump(i)) for i in range(p.n)]
    try:
        done = 0
        while done < p.n:
            got = await q.get()
            if got is None:
                done += 1
            elif isinstance(got, BaseException):
                raise got
            else:
                yield got
    finally:
        for t in tasks:
            t.cancel()


async def _events(st: ServerState, p: Prompt, out: Completion) -> AsyncIterator[bytes]:
    """Server-sent events: a chunk per token, a last chunk per choice with its finish reason,
    the usage chunk when asked for, [DONE]."""
    counts = [0] * p.n
    offsets = [0] * p.n
    try:
        async for index, item in _merged(st, p):
            lp = None
            if item[0] == "kv":
                continue
            if item[0] == "end" and item[2] == "error":
                st.log.error(where(st.era, Site.REQUEST_FAILED), request_failed(out.id))
                err = {"error": {"message": GENERATION_ERROR, "type": "InternalServerError",
                                 "param": None, "code": 500}}  # fmt: skip
                yield f"data: {json.dumps(err)}\n\n".encode()
                break
            if item[0] == "tok":
                if p.logprobs is not None:
                    lp = out.logprobs([item[2]], p.logprobs, counts[index], offsets[index])
                counts[index] += 1
                offsets[index] += len(item[2])
                choice = out.choice(index, item[2], None, True, lp)
            else:
                choice = out.choice(index, "", item[2], True, lp)
            yield f"data: {json.dumps(out.chunk(choice))}\n\n".encode()
        if p.include_usage:
            usage = out.usage_chunk(p.tokens, sum(counts))
            yield f"data: {json.dumps(usage)}\n\n".encode()
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
    parts: list[list[str]] = [[] for _ in range(p.n)]
    reasons, n_out = ["stop"] * p.n, 0
    kv_params: dict[str, Any] | None = None
    try:
        async for index, item in _merged(st, p):
            if item[0] == "tok":
                parts[index].append(item[2])
            elif item[0] == "kv":
                kv_params = item[2]
            else:
                reasons[index], n_out = item[2], n_out + item[3]
    except EngineDead:
        return error(500, ENGINE_ERROR, "InternalServerError")
    if "error" in reasons:
        # _raise_if_error: GenerationError, answered without a traceback
        st.log.error(where(st.era, Site.REQUEST_FAILED), request_failed(out.id))
        return error(500, GENERATION_ERROR, "InternalServerError")
    choices = []
    for i, toks in enumerate(parts):
        lp = out.logprobs(toks, p.logprobs, 0, 0) if p.logprobs is not None else None
        choices.append(out.choice(i, "".join(toks), reasons[i], False, lp))
    whole = out.whole(choices, p.tokens, n_out)
    if kv_params is not None:
        whole["kv_transfer_params"] = kv_params
    return JSONResponse(whole)


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
            "created": int(clock.now()),
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
        # serving/engine/serving.py: _base_request_id takes the client's X-Request-Id
        base = request.headers.get("X-Request-Id") or f"{next(st.ids):032x}"
        cid = f"{'chatcmpl' if chat else 'cmpl'}-{base}"
        out = Completion(chat, cid, int(clock.now()), st.served_name)
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
            self.st.metrics.set_sleep_level(level or None)
            if level >= 1:
                took = 0.05 / max(self.st.time_scale, 1.0)
                self.st.log.info(
                    where(self.st.era, Site.SLEEP_TOOK),
                    f"It took {took:.6f} seconds to fall asleep.",
                )
        elif level >= 1:
            self.st.log.warning(
                where(self.st.era, Site.ALREADY_SLEEPING), "Executor is already sleeping."
            )
        return JSONResponse({"status": "sleeping", "level": level})

    async def wake_up(self, request: Request) -> Response:
        tags = request.query_params.getlist("tags") or None
        self.st.log.info(where(self.st.era, Site.WAKE_UP), f"wake up the engine with tags: {tags}")
        if self.st.sleeping is None:
            self.st.log.warning(where(self.st.era, Site.NOT_SLEEPING), "Executor is not sleeping.")
        elif self.st.sleeping >= 1:
            took = 0.1 / max(self.st.time_scale, 1.0)
            self.st.log.info(
                where(self.st.era, Site.WAKE_TOOK),
                f"It took {took:.6f} seconds to wake up tags {SLEEP_TAGS}.",
            )
        self.st.sleeping = None
        self.st.metrics.set_sleep_level(None)
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
