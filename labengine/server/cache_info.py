"""The labels of `vllm:cache_config_info`: vLLM's CacheConfig as `metrics_info()` gives it
(vllm/config/cache.py: `{key: str(value) for key, value in self.__dict__.items()}`), in the
API server process once the engine core has reported its KV cache
(vllm/v1/engine/core_client.py), plus the `engine` label (vllm/v1/metrics/loggers.py:
log_metrics_info). Each era has its own field list, in the order its dataclass declares them.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllmfacts.memory import BLOCK_SIZE
from vllmfacts.wording import Era


@dataclass(frozen=True)
class CacheState:
    """What the lab engine knows of the cache config once the engine core is ready."""

    utilization: float
    cache_dtype: str
    prefix_caching: bool
    num_gpu_blocks: int
    kv_tokens: int
    concurrency: float


def cache_config_info(era: Era, c: CacheState) -> dict[str, str]:
    """CacheConfig.__dict__ as strings; `_block_size_resolved` comes last, set by the
    block-size validator after the dataclass fields."""
    head = {
        "block_size": BLOCK_SIZE,
        "user_specified_block_size": False,
    }
    if era is Era.V0_33:
        fields: dict[str, object] = {
            **head,
            "kv_cache_layout": None,
            "prefix_match_unit": None,
            "gpu_memory_utilization": c.utilization,
            "cache_dtype": c.cache_dtype,
            "is_attention_free": False,
            "num_gpu_blocks_override": None,
            "sliding_window": None,
            "enable_prefix_caching": c.prefix_caching,
            "prefix_caching_hash_algo": "sha256",
            "prefix_cache_retention_interval": 0,
            "kv_cache_dtype_skip_layers": [],
            "mamba_page_size_padded": None,
            "skip_page_size_padded": None,
            "mamba_block_size": None,
            "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "enable_mamba_shared_prefix_checkpoint": False,
            "replayssm_buffer_len": 16,
            "use_replayssm": False,
            "use_kda_recoverssm": False,
            "num_gpu_blocks": c.num_gpu_blocks,
            "num_cpu_blocks": None,
            "simple_cpu_offload_num_blocks": None,
            "effective_attention_block_size": BLOCK_SIZE,
            "kv_cache_size_tokens": c.kv_tokens,
            "kv_cache_max_concurrency": c.concurrency,
            "hash_block_size": None,
            "cache_hit_alignment_tokens": None,
            "kv_sharing_fast_prefill": False,
            "swa_bounded_replay": True,
        }
    else:
        fields = {
            **head,
            "gpu_memory_utilization": c.utilization,
            "cache_dtype": c.cache_dtype,
            "is_attention_free": False,
            "num_gpu_blocks_override": None,
            "sliding_window": None,
            "enable_prefix_caching": c.prefix_caching,
            "prefix_caching_hash_algo": "sha256",
            "calculate_kv_scales": False,
            "kv_cache_dtype_skip_layers": [],
            "cpu_kvcache_space_bytes": None,
            "mamba_page_size_padded": None,
            "mamba_block_size": None,
            "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "num_gpu_blocks": c.num_gpu_blocks,
            "num_cpu_blocks": None,
            "kv_sharing_fast_prefill": False,
        }
    tail = {
        "kv_cache_memory_bytes": None,
        "kv_offloading_size": None,
        "kv_offloading_backend": "native",
        "_block_size_resolved": True,
    }
    return {k: str(v) for k, v in {**fields, **tail}.items()}
