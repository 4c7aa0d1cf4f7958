"""The lab engine's API through the official `openai` client, against `vllm-lab serve`, and a
Prometheus scrape of every metric family vLLM 0.33's v1 engine registers by default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
HELLO = [{"role": "user", "content": "hello"}]
HELLO_PROMPT_TOKENS = 25  # the chat template's 19, 5 for the message, 1 for "hello"

# vllm/v1/metrics/loggers.py (PrometheusStatLogger.__init__ and log_metrics_info), vLLM 0.33.0,
# with default settings: the families it registers, and their types
V1_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:engine_sleep_state": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:external_prefix_cache_queries": "counter",
    "vllm:external_prefix_cache_hits": "counter",
    "vllm:mm_cache_queries": "counter",
    "vllm:mm_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prompt_tokens_by_source": "counter",
    "vllm:prompt_tokens_cached": "counter",
    "vllm:prompt_tokens_cached_by_source": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:admission_rejections": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_num_preemptions": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram",
}


def serve(*extra: str, model: str = QWEN) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "GAMEDAY_"))}
    env["GAMEDAY_TIME_SCALE"] = "1000"
    proc = subprocess.Popen(
        [sys.executable, "-m", "labengine", "serve", model, "--max-model-len", "4096",
         "--host", "127.0.0.1", "--port", str(port), *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield base
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    yield from serve()


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0)


def test_stream_usage_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model=QWEN,
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},  # type: ignore[arg-type]
    )
    chunks = list(stream)
    assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        HELLO_PROMPT_TOKENS,
        21,
        HELLO_PROMPT_TOKENS + 21,
    )


def test_completion_stream_usage_chunk(client: openai.OpenAI) -> None:
    stream = client.completions.create(
        model=QWEN, prompt="hi there", max_tokens=3, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    assert [c.choices[0].text for c in chunks[:3]] == [",", " messages", " and"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 5


def test_n_two_choices(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=QWEN, messages=HELLO, n=2)  # type: ignore[arg-type]
    assert [c.index for c in r.choices] == [0, 1]
    first, second = (c.message.content for c in r.choices)
    assert first != second
    again = client.chat.completions.create(model=QWEN, messages=HELLO, n=2)  # type: ignore[arg-type]
    assert [c.message.content for c in again.choices] == [first, second]


def test_chat_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model=QWEN,
        messages=HELLO,
        max_tokens=2,
        logprobs=True,
        top_logprobs=3,  # type: ignore[arg-type]
    )
    content = r.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None
    assert [c.token for c in content] == [".", " the"]
    assert [len(c.top_logprobs) for c in content] == [3, 3]
    assert [c.top_logprobs[0].token for c in content] == [".", " the"]
    assert content[1].bytes == [32, 116, 104, 101]


def test_completion_logprobs(client: openai.OpenAI) -> None:
    r = client.completions.create(model=QWEN, prompt="hi there", max_tokens=3, logprobs=2)
    lp = r.choices[0].logprobs
    assert lp is not None
    assert lp.tokens == [",", " messages", " and"]
    assert lp.text_offset == [0, 1, 10]
    assert [len(t) for t in lp.top_logprobs or []] == [2, 2, 2]


def test_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=QWEN, prompt="hi", max_tokens=5000)
    assert e.value.status_code == 400
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="hi")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=QWEN, messages=HELLO, logprobs=True, top_logprobs=21)  # type: ignore[arg-type]
    assert e.value.body == {
        "message": "Requested sample logprobs of 21, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=21)",
        "type": "BadRequestError",
        "param": "logprobs",
        "code": 400,
    }


def test_metrics_scrape_has_every_v1_family(url: str, client: openai.OpenAI) -> None:
    client.completions.create(model=QWEN, prompt="hi there", max_tokens=3)
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(url + "/metrics").text)}
    # the parser names counters without their _total suffix
    got = {name: families[name].type for name in V1_FAMILIES if name in families}
    assert got == V1_FAMILIES
    ttft = families["vllm:time_to_first_token_seconds"]
    count = [s.value for s in ttft.samples if s.name.endswith("_count")]
    assert count[0] >= 1.0
    les = [s.labels["le"] for s in ttft.samples if s.name.endswith("_bucket")]
    assert les[:3] == ["0.001", "0.005", "0.01"]


def test_cache_config_info_scrape(url: str) -> None:
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(url + "/metrics").text)}
    (sample,) = families["vllm:cache_config_info"].samples
    assert sample.value == 1.0
    # the EKS start-failure write-up's baseline: 49,696 tokens in 3,106 blocks of 16, at
    # utilisation 0.9
    assert {k: sample.labels[k] for k in ("num_gpu_blocks", "gpu_memory_utilization",
                                          "block_size", "cache_dtype", "engine")} == {
        "num_gpu_blocks": "3106", "gpu_memory_utilization": "0.9", "block_size": "16",
        "cache_dtype": "auto", "engine": "0",
    }  # fmt: skip


@pytest.fixture(scope="module")
def wide_client() -> Iterator[openai.OpenAI]:
    for base in serve("--max-logprobs", "-1", "--max-num-seqs", "1"):
        yield openai.OpenAI(base_url=base + "/v1", api_key="EMPTY", max_retries=0)


def test_logprobs_minus_one_over_the_default_limit(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=QWEN, prompt="hi", max_tokens=2, logprobs=-1)
    assert e.value.body == {
        "message": "Requested sample logprobs of 152064, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=152064)",
        "type": "BadRequestError",
        "param": "logprobs",
        "code": 400,
    }


def test_max_logprobs_flag_lifts_the_limit(wide_client: openai.OpenAI) -> None:
    r = wide_client.completions.create(model=QWEN, prompt="hi there", max_tokens=2, logprobs=25)
    assert [len(t) for t in r.choices[0].logprobs.top_logprobs or []] == [25, 25]  # type: ignore[union-attr]
    chat = wide_client.chat.completions.create(
        model=QWEN,
        messages=HELLO,
        max_tokens=1,
        logprobs=True,
        top_logprobs=-1,  # type: ignore[arg-type]
    )
    # -1 is the whole vocabulary: the lab engine's is its word list of 38 distinct words
    assert len(chat.choices[0].logprobs.content[0].top_logprobs) == 38  # type: ignore[union-attr, index]


BASE = "meta-llama/Llama-2-7b-hf"  # a base model: its tokenizer defines no chat template
NO_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide "
    "a chat template if the tokenizer does not define one."
)


def test_without_a_chat_template_chat_is_refused_and_completions_serve() -> None:
    base = serve(model=BASE)
    url = next(base)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=BASE, messages=HELLO)  # type: ignore[arg-type]
        assert e.value.body == {
            "message": NO_TEMPLATE,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
        # what a client pastes: the openai library's own words around vLLM's body
        assert str(e.value) == f"Error code: 400 - {NO_TEMPLATE}"
        with pytest.raises(openai.NotFoundError):  # the model is checked before the template
            client.chat.completions.create(model="other", messages=HELLO)  # type: ignore[arg-type]
        done = client.completions.create(model=BASE, prompt="hi there", max_tokens=3)
        assert done.choices[0].text
    finally:
        next(base, None)


def test_a_chat_template_flag_gives_the_base_model_one() -> None:
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    base = serve("--chat-template", template, model=BASE)
    url = next(base)
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0)
        done = client.chat.completions.create(model=BASE, messages=HELLO, max_tokens=3)  # type: ignore[arg-type]
        assert done.choices[0].message.content
    finally:
        next(base, None)
