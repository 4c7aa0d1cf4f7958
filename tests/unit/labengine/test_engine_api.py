"""The engine's OpenAI-compatible API, /metrics, and engine death -> exit 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env["GAMEDAY_TIME_SCALE"] = "1000"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labengine",
            "serve",
            QWEN,
            "--max-model-len",
            "4096",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
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


def test_models(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    data = httpx.get(url + "/v1/models").json()["data"][0]
    assert data["id"] == QWEN and data["owned_by"] == "vllm" and data["max_model_len"] == 4096


def test_chat_is_deterministic(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    body = {"model": QWEN, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 128}
    a = httpx.post(url + "/v1/chat/completions", json=body).json()
    b = httpx.post(url + "/v1/chat/completions", json=body).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert a["choices"][0]["finish_reason"] == "stop"
    assert (
        a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"]
    )


def test_length_and_context_limits(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}).json()
    assert r["choices"][0]["finish_reason"] == "length"
    r = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 5000})
    assert r.status_code == 400 and "maximum context length is 4096" in r.text
    r = httpx.post(url + "/v1/completions", json={"model": "other", "prompt": "hi"})
    assert r.status_code == 404


def test_streaming(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 64, "stream": True},
    ) as r:
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_metrics_names(engine: tuple[str, subprocess.Popen[str]]) -> None:
    url, _ = engine
    text = httpx.get(url + "/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
    ):
        assert name + "{" in text
    assert "gpu_cache_usage_perc" not in text


def test_engine_core_death_exits_zero(engine: tuple[str, subprocess.Popen[str]]) -> None:
    """vLLM issue 48966: EngineCore dies, the API server shuts down gracefully, exit code 0."""
    _, proc = engine
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        core = [int(x) for x in f.read().split()]
    assert core, "the API server forks an engine-core process"
    os.kill(core[0], signal.SIGKILL)
    assert proc.wait(15) == 0
    out = proc.stdout.read() if proc.stdout else ""
    assert "EngineDeadError: EngineCore encountered an issue" in out
    assert "Finished server process" in out
