"""The engine's OpenAI-compatible API, /metrics, and engine death -> exit 0.

The routes that never reach the engine core (metadata, request validation, metrics at rest) run
in-process on the Starlette app; generation, streaming and engine death need the engine-core
process, so they run against `vllm-lab serve` itself.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from labengine.logs import VllmLog
from labengine.server import ServerState, build_app
from labengine.wording import Era

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
LABELS = f'engine="0",model_name="{QWEN}"'

# The stand-in's answer to the chat message "hello" (labengine.textgen): sha256(model NUL prompt)
# starts with bytes 123, 187, so the answer is 6 + 123 % 18 = 21 words of the word list (47
# long) from index 187 % 47 = 46 (".") on, wrapping round. Its prompt is 25 tokens: the chat
# template's 19, 5 for the one message, 1 for "hello".
HELLO_WORDS = [
    ".", "the", "service", "is", "healthy", "and", "ready", "to", "answer", "requests", ".",
    "I", "am", "a", "helpful", "assistant", "running", "on", "the", "lab", "engine",
]  # fmt: skip
HELLO_ANSWER = " ".join(HELLO_WORDS)
HELLO_PROMPT_TOKENS = 19 + 5 + 1


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
    samples = [ln for ln in r.text.splitlines() if ln.startswith("vllm:")]
    assert samples == [
        f"vllm:num_requests_running{{{LABELS}}} 0.0",
        f"vllm:num_requests_waiting{{{LABELS}}} 0.0",
        f"vllm:kv_cache_usage_perc{{{LABELS}}} 0.0",
    ]


# ---- against the engine process -------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env["GAMEDAY_TIME_SCALE"] = "1000"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labengine", "serve", QWEN, "--max-model-len", "4096",
         "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield url, proc
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


def test_chat_completion(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    body = {"model": QWEN, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 128}
    for _ in range(2):  # the same request, the same answer
        r = httpx.post(url + "/v1/chat/completions", json=body).json()
        assert re.fullmatch(r"chatcmpl-[0-9a-f]{32}", r.pop("id"))
        assert isinstance(r.pop("created"), int)
        assert r == {
            "object": "chat.completion",
            "model": QWEN,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": HELLO_ANSWER},
                    "logprobs": None,
                    "finish_reason": "stop",
                    "stop_reason": None,
                }
            ],
            "usage": {
                "prompt_tokens": HELLO_PROMPT_TOKENS,
                "completion_tokens": 21,
                "total_tokens": HELLO_PROMPT_TOKENS + 21,
            },
        }


def test_completion_cut_at_max_tokens(engine: tuple[str, subprocess.Popen[str]]) -> None:
    """ "hi there" (2 tokens): sha256 starts 213, 29: a 6 + 213 % 18 = 21-word answer from word
    29 (","): cut to 3 tokens, finish_reason "length"."""
    url, _ = engine
    r = httpx.post(url + "/v1/completions", json={"prompt": "hi there", "max_tokens": 3}).json()
    assert (r["object"], r["choices"], r["usage"]) == (
        "text_completion",
        [
            {
                "index": 0,
                "text": ", messages and",
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        ],
        {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
    )


def test_streaming(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 64, "stream": True},
    ) as r:
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks]
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert pieces == [HELLO_WORDS[0], *(" " + w for w in HELLO_WORDS[1:]), ""]
    assert reasons == [None] * 21 + ["stop"]


def metric(url: str, sample: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return 0.0  # a labelled counter appears with its first increment


def test_metrics_count_tokens(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    names = [
        f"vllm:prompt_tokens_total{{{LABELS}}}",
        f"vllm:generation_tokens_total{{{LABELS}}}",
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{QWEN}"}}',
        f"vllm:num_requests_running{{{LABELS}}}",
    ]
    before = [metric(url, n) for n in names]
    httpx.post(url + "/v1/completions", json={"prompt": "hi there", "max_tokens": 3})
    after = [metric(url, n) for n in names]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2.0, 3.0, 1.0, 0.0]
    text = httpx.get(url + "/metrics").text
    assert "gpu_cache_usage_perc" not in text  # the pre-0.10 name, gone from vLLM


def test_engine_core_death_exits_zero(engine: tuple[str, subprocess.Popen[str]]) -> None:
    """vLLM issue 48966: EngineCore dies, the API server shuts down gracefully, exit code 0."""
    _, proc = engine
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        core = [int(x) for x in f.read().split()]
    assert len(core) == 1  # the API server forks one engine-core process
    os.kill(core[0], signal.SIGKILL)
    assert proc.wait(15) == 0
    out = proc.stdout.read() if proc.stdout else ""
    prefix = f"(APIServer pid={proc.pid}) "
    lines = [ln.removeprefix(prefix) for ln in out.splitlines() if ln.startswith(prefix)]
    at = next(i for i, ln in enumerate(lines) if "[core_client.py:564]" in ln)
    stamp = r"ERROR \d\d-\d\d \d\d:\d\d:\d\d "
    assert re.fullmatch(
        stamp + r"\[core_client.py:564\] Engine core proc EngineCore_DP0 died unexpectedly, "
        r"shutting down client\.",
        lines[at],
    )
    assert re.fullmatch(
        stamp + r"\[async_llm.py:480\] AsyncLLM output_handler failed\.", lines[at + 1]
    )
    assert lines[at + 2 : at + 6] == [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 439, '
        "in output_handler",
        "    outputs = await engine_core.get_output_async()",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    ]
    assert lines[-1] == f"INFO:     Finished server process [{proc.pid}]"
