"""The engine's OpenAI-compatible API, /metrics, and engine death -> exit 0.

The routes that never reach the engine core (metadata, request validation, metrics at rest) run
in-process on the Starlette app; generation, streaming and engine death need the engine-core
process, so they run against `vllm-lab serve` itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

HELLO_WORDS = [
    ".", "the", "service", "is", "healthy", "and", "ready", "to", "answer", "requests", ".",
    "I", "am", "a", "helpful", "assistant", "running", "on", "the", "lab", "engine",
]  # fmt: skip


HELLO_ANSWER = " ".join(HELLO_WORDS)


HELLO_PROMPT_TOKENS = 19 + 5 + 1


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
    at = next(i for i, ln in enumerate(lines) if "[core_client.py:667]" in ln)
    stamp = r"ERROR \d\d-\d\d \d\d:\d\d:\d\d "
    assert re.fullmatch(
        stamp + r"\[core_client.py:667\] Engine core proc EngineCore_DP0 died unexpectedly, "
        r"shutting down client\.",
        lines[at],
    )
    assert re.fullmatch(
        stamp + r"\[async_llm.py:707\] AsyncLLM output_handler failed\.", lines[at + 1]
    )
    engine = "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine"
    # logger.exception: the traceback is the record's, each of its lines behind the record's head
    head = re.compile(stamp + r"\[async_llm.py:707\] ")
    assert all(head.match(ln) for ln in lines[at + 2 : at + 9])
    assert [head.sub("", ln, count=1) for ln in lines[at + 2 : at + 9]] == [
        "Traceback (most recent call last):",
        f'  File "{engine}/async_llm.py", line 663, in output_handler',
        "    outputs = await engine_core.get_output_async()",
        "              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{engine}/core_client.py", line 985, in get_output_async',
        "    raise self._format_exception(outputs) from None",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    ]
    assert lines[-1] == f"INFO:     Finished server process [{proc.pid}]"


QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"


LABELS = f'engine="0",model_name="{QWEN}"'
