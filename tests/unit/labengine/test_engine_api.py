"""The engine's OpenAI-compatible API, /metrics, and engine death -> exit 0.

The routes that never reach the engine core (metadata, request validation, metrics at rest) run
in-process on the Starlette app; generation, streaming and engine death need the engine-core
process, so they run against `vllm-lab serve` itself.
"""

from __future__ import annotations

import asyncio
import io
import multiprocessing
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from labengine.logs import VllmLog
from labengine.server import ServerState, build_app
from vllmfacts.wording import Era

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
LABELS = f'engine="0",model_name="{QWEN}"'

# The stand-in's answer to the chat message "hello" (labengine.textgen): sha256(model NUL prompt)
# starts with bytes 123, 187, so the answer is 6 + 123 % 18 = 21 words of the word list (47
# long) from index 187 % 47 = 46 (".") on, wrapping round. Its prompt is 25 tokens: the chat
# template's 19, 5 for the one message, 1 for "hello".


def error_body(status: int, message: str, etype: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": None, "code": status}}


class App:
    """Requests to the app in-process (httpx's ASGI transport), one event loop each."""

    def __init__(self, st: ServerState) -> None:
        self.app = build_app(st)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://lab") as client:
                return await client.request(method, path, **kwargs)

        return asyncio.run(send())

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


@pytest.fixture
def app() -> Iterator[App]:
    """The API server's app with an engine core that never answers (nothing here reaches it)."""
    conn, engine_end = multiprocessing.Pipe()
    st = ServerState(
        era=Era.V0_19,
        served_name=QWEN,
        model_root=QWEN,
        max_model_len=4096,
        kv_tokens=60_000,
        conn=conn,
        log=VllmLog("APIServer"),
        keep_alive_on_death=False,
        stats_interval_s=10.0,
    )
    yield App(st)
    engine_end.close()


def test_models_version_and_health(app: App) -> None:
    before = int(time.time())
    models = app.get("/v1/models").json()
    created = models["data"][0].pop("created")
    assert before <= created <= int(time.time())
    assert models == {
        "object": "list",
        "data": [
            {
                "id": QWEN,
                "object": "model",
                "owned_by": "vllm",
                "root": QWEN,
                "parent": None,
                "max_model_len": 4096,
            }
        ],
    }
    assert app.get("/version").json() == {"version": "0.19.1"}
    assert app.get("/health").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "message", "etype"),
    [
        (
            "/v1/completions",
            {"prompt": "hi", "max_tokens": 5000},
            400,
            # "hi" is 1 token: 1 + 5000 = 5001
            "This model's maximum context length is 4096 tokens. However, you requested 5001 "
            "tokens (1 in the messages, 5000 in the completion). Please reduce the length of "
            "the messages or completion.",
            "BadRequestError",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4072},
            400,
            # 25 prompt tokens + 4072 = 4097, one over the window
            "This model's maximum context length is 4096 tokens. However, you requested 4097 "
            "tokens (25 in the messages, 4072 in the completion). Please reduce the length of "
            "the messages or completion.",
            "BadRequestError",
        ),
        (
            "/v1/completions",
            {"prompt": "hi", "max_tokens": 0},
            400,
            "max_tokens must be at least 1, got 0.",
            "BadRequestError",
        ),
        (
            "/v1/completions",
            {"model": "other", "prompt": "hi"},
            404,
            "The model `other` does not exist.",
            "NotFoundError",
        ),
        (
            "/v1/chat/completions",
            {"messages": []},
            400,
            "messages: Field required",
            "BadRequestError",
        ),
        ("/v1/completions", {"prompt": 3}, 400, "prompt: Field required", "BadRequestError"),
        ("/v1/completions", [1], 400, "Request body must be a JSON object", "BadRequestError"),
    ],
)
def test_request_errors(
    app: App, path: str, body: Any, status: int, message: str, etype: str
) -> None:
    r = app.post(path, json=body)
    assert (r.status_code, r.json()) == (status, error_body(status, message, etype))


def test_invalid_json(app: App) -> None:
    r = app.post("/v1/completions", content=b"{bad")
    assert (r.status_code, r.json()) == (
        400,
        error_body(400, "Invalid JSON body", "BadRequestError"),
    )


def test_metrics_at_rest(app: App) -> None:
    r = app.get("/metrics")
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    gauges = (
        "vllm:num_requests_running{",
        "vllm:num_requests_waiting{",
        "vllm:kv_cache_usage_perc{",
    )
    samples = [ln for ln in r.text.splitlines() if ln.startswith(gauges)]
    assert samples == [
        f"vllm:num_requests_running{{{LABELS}}} 0.0",
        f"vllm:num_requests_waiting{{{LABELS}}} 0.0",
        f"vllm:kv_cache_usage_perc{{{LABELS}}} 0.0",
    ]


# ---- against the engine process -------------------------------------------------------------


def dev_app(stream: io.StringIO) -> App:
    conn, _ = multiprocessing.Pipe()
    st = ServerState(
        era=Era.V0_33,
        served_name=QWEN,
        model_root=QWEN,
        max_model_len=4096,
        kv_tokens=60_000,
        conn=conn,
        log=VllmLog("APIServer", stream),
        keep_alive_on_death=False,
        stats_interval_s=10.0,
        time_scale=100.0,
        dev_mode=True,
    )
    return App(st)


def test_sleep_routes_exist_only_in_dev_mode(app: App) -> None:
    assert app.post("/sleep").status_code == 404
    assert app.post("/wake_up").status_code == 404
    assert app.get("/is_sleeping").status_code == 404


def test_asleep_health_answers_and_generation_is_refused_as_vllm_does() -> None:
    stream = io.StringIO()
    dev = dev_app(stream)
    assert dev.get("/is_sleeping").json() == {"is_sleeping": False}
    assert dev.post("/sleep?level=1").json() == {"status": "sleeping", "level": 1}
    assert dev.get("/is_sleeping").json() == {"is_sleeping": True}
    assert dev.get("/health").status_code == 200
    r = dev.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 503
    assert r.json() == error_body(
        503, "Generation is paused. Please retry after it resumes.", "ServiceUnavailableError"
    )
    assert dev.post("/sleep?level=3").status_code == 400
    assert dev.post("/wake_up").json() == {"status": "awake", "tags": None}
    assert dev.get("/is_sleeping").json() == {"is_sleeping": False}
    lines = [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]
    assert lines == [
        "It took 0.000500 seconds to fall asleep.",
        "wake up the engine with tags: None",
        "It took 0.001000 seconds to wake up tags {'weights', 'kv_cache'}.",
    ]


def test_waking_an_awake_engine_warns() -> None:
    stream = io.StringIO()
    dev = dev_app(stream)
    assert dev.post("/wake_up?tags=weights").json() == {"status": "awake", "tags": ["weights"]}
    assert stream.getvalue().splitlines()[-1].endswith("] Executor is not sleeping.")
