"""vllm:num_requests_waiting past max_num_seqs, vllm:cache_config_info's labels, and the
logprobs checks of vLLM 0.33 (sampling_params.py: _validate_logprobs)."""

from __future__ import annotations

import json

from labengine.server.cache_info import CacheState, cache_config_info
from labengine.server.metrics import EngineMetrics, throughput_line
from labengine.server.process import engine_idle
from labengine.server.routes import sampling_of
from vllmfacts.wording import Era

LV = 'engine="0",model_name="qwen"'


def queue_lines(m: EngineMetrics) -> list[str]:
    capacity = f'vllm:num_requests_waiting_by_reason{{{LV},reason="capacity"}}'
    wanted = ("vllm:num_requests_running{", "vllm:num_requests_waiting{", capacity)
    return [ln for ln in m.exposition().decode().splitlines() if ln.startswith(wanted)]


def test_requests_past_max_num_seqs_wait() -> None:
    m = EngineMetrics("qwen", max_num_seqs=2)
    for _ in range(3):
        m.started(0.1)
    assert queue_lines(m) == [
        f"vllm:num_requests_running{{{LV}}} 2.0",
        f"vllm:num_requests_waiting{{{LV}}} 1.0",
        f'vllm:num_requests_waiting_by_reason{{{LV},reason="capacity"}} 1.0',
    ]
    assert m.queue_sizes() == (2, 1)
    m.left()  # a waiting request takes the free seat
    assert queue_lines(m) == [
        f"vllm:num_requests_running{{{LV}}} 2.0",
        f"vllm:num_requests_waiting{{{LV}}} 0.0",
        f'vllm:num_requests_waiting_by_reason{{{LV},reason="capacity"}} 0.0',
    ]
    m.left()
    assert m.queue_sizes() == (1, 0)


def test_throughput_line_counts_the_waiting() -> None:
    assert throughput_line(12.0, 30.5, 256, 0.25, waiting=4) == (
        "Engine 000: Avg prompt throughput: 12.0 tokens/s, Avg generation throughput: 30.5 "
        "tokens/s, Running: 256 reqs, Waiting: 4 reqs, GPU KV cache usage: 25.0%, "
        "Prefix cache hit rate: 0.0%"
    )


STATE = CacheState(
    utilization=0.9,
    cache_dtype="auto",
    prefix_caching=True,
    num_gpu_blocks=3106,
    kv_tokens=49_696,
    concurrency=12.1328125,
)


def test_cache_config_info_labels_033() -> None:
    # vllm/config/cache.py 0.33.0: CacheConfig's fields in declaration order
    assert cache_config_info(Era.V0_33, STATE) == {
        "block_size": "16", "user_specified_block_size": "False", "kv_cache_layout": "None",
        "prefix_match_unit": "None", "gpu_memory_utilization": "0.9", "cache_dtype": "auto",
        "is_attention_free": "False", "num_gpu_blocks_override": "None",
        "sliding_window": "None", "enable_prefix_caching": "True",
        "prefix_caching_hash_algo": "sha256", "prefix_cache_retention_interval": "0",
        "kv_cache_dtype_skip_layers": "[]", "mamba_page_size_padded": "None",
        "skip_page_size_padded": "None", "mamba_block_size": "None",
        "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto",
        "mamba_cache_mode": "none", "enable_mamba_shared_prefix_checkpoint": "False",
        "replayssm_buffer_len": "16", "use_replayssm": "False", "use_kda_recoverssm": "False",
        "num_gpu_blocks": "3106", "num_cpu_blocks": "None",
        "simple_cpu_offload_num_blocks": "None", "effective_attention_block_size": "16",
        "kv_cache_size_tokens": "49696", "kv_cache_max_concurrency": "12.1328125",
        "hash_block_size": "None", "cache_hit_alignment_tokens": "None",
        "kv_sharing_fast_prefill": "False", "swa_bounded_replay": "True",
        "kv_cache_memory_bytes": "None", "kv_offloading_size": "None",
        "kv_offloading_backend": "native", "_block_size_resolved": "True",
    }  # fmt: skip


def test_cache_config_info_labels_019() -> None:
    info = cache_config_info(Era.V0_19, STATE)
    assert list(info) == [
        "block_size", "user_specified_block_size", "gpu_memory_utilization", "cache_dtype",
        "is_attention_free", "num_gpu_blocks_override", "sliding_window",
        "enable_prefix_caching", "prefix_caching_hash_algo", "calculate_kv_scales",
        "kv_cache_dtype_skip_layers", "cpu_kvcache_space_bytes", "mamba_page_size_padded",
        "mamba_block_size", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_cache_mode",
        "num_gpu_blocks", "num_cpu_blocks", "kv_sharing_fast_prefill", "kv_cache_memory_bytes",
        "kv_offloading_size", "kv_offloading_backend", "_block_size_resolved",
    ]  # fmt: skip
    assert info["num_gpu_blocks"] == "3106"


def test_cache_config_info_is_a_gauge_at_one() -> None:
    info = cache_config_info(Era.V0_19, STATE)
    m = EngineMetrics("qwen", cache_info=info)
    lines = [
        ln for ln in m.exposition().decode().splitlines() if ln.startswith("vllm:cache_config")
    ]
    assert len(lines) == 1
    assert lines[0].startswith('vllm:cache_config_info{_block_size_resolved="True",')
    assert 'engine="0"' in lines[0] and 'num_gpu_blocks="3106"' in lines[0]
    assert lines[0].endswith("} 1.0")


def body(resp: object) -> dict[str, object]:
    return json.loads(resp.body)["error"]  # type: ignore[attr-defined, no-any-return]


def test_logprobs_minus_one_is_the_vocabulary() -> None:
    over = sampling_of({"logprobs": -1}, chat=False, max_logprobs=20, vocab_size=152064)
    assert body(over)["message"] == (
        "Requested sample logprobs of 152064, which is greater than max allowed: 20 "
        "(parameter=logprobs, value=152064)"
    )
    assert sampling_of({"logprobs": -1}, chat=False, max_logprobs=-1, vocab_size=152064) == (
        1,
        152064,
    )
    chat = {"logprobs": True, "top_logprobs": -1}
    assert sampling_of(chat, chat=True, max_logprobs=-1, vocab_size=152064) == (1, 152064)


def test_max_logprobs_moves_the_limit() -> None:
    assert sampling_of({"logprobs": 25}, chat=False, max_logprobs=30, vocab_size=10) == (1, 25)
    over = sampling_of({"logprobs": 31}, chat=False, max_logprobs=30, vocab_size=10)
    assert body(over)["message"] == (
        "Requested sample logprobs of 31, which is greater than max allowed: 30 "
        "(parameter=logprobs, value=31)"
    )
    assert sampling_of({"logprobs": 0}, chat=False, max_logprobs=0, vocab_size=10) == (1, 0)


def test_completion_logprobs_below_minus_one_is_refused() -> None:
    bad = sampling_of({"logprobs": -2}, chat=False)
    assert body(bad) == {
        "message": "`logprobs` must be a positive value or -1. (parameter=logprobs, value=-2)",
        "type": "BadRequestError",
        "param": "logprobs",
        "code": 400,
    }


def test_the_stats_line_stops_once_no_tokens_are_made() -> None:
    # vllm/v1/metrics/loggers.py (0.32): DEBUG, so nothing by default, once this interval and
    # the one before made no token, whatever waits: a hung engine logs one line of zeros, then
    # nothing
    assert not engine_idle((12.0, 30.5), (0.0, 0.0))
    assert not engine_idle((0.0, 0.0), (12.0, 30.5))
    assert engine_idle((0.0, 0.0), (0.0, 0.0))
