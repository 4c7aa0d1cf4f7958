"""vLLM's start-up memory arithmetic (vllm/v1/worker/gpu_worker.py, vllm/v1/core/kv_cache_utils.py).

Pure functions; the numbers in the seeds are unit-tested against them.

    budget        = ceil(cuda_total * gpu_memory_utilization)
    non_kv        = loaded weights + activation peak of the profiling run + non-torch memory
    available_kv  = budget - non_kv
    page (block)  = block_size * layers * 2 * kv_heads * head_dim * dtype_bytes
    blocks        = available_kv // page;  tokens = blocks * block_size
    needed(len)   = ceil(len / block_size) * page
    concurrency   = tokens / max_model_len
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labengine.wording import Era

BLOCK_SIZE = 16


@dataclass(frozen=True)
class KvPlan:
    budget: int
    non_kv: int
    available: int
    page_bytes: int
    num_blocks: int
    max_model_len: int

    @property
    def tokens(self) -> int:
        return self.num_blocks * BLOCK_SIZE

    @property
    def concurrency(self) -> float:
        return self.tokens / self.max_model_len

    @property
    def needed(self) -> int:
        return needed_bytes(self.max_model_len, self.page_bytes)

    @property
    def fits(self) -> bool:
        return self.available > 0 and self.needed <= self.available


def page_bytes(layers: int, per_token_per_layer: int) -> int:
    return BLOCK_SIZE * layers * per_token_per_layer


def needed_bytes(max_model_len: int, page: int) -> int:
    return math.ceil(max_model_len / BLOCK_SIZE) * page


def plan(
    *,
    cuda_total: int,
    utilization: float,
    loaded_weights: int,
    activation_peak: int,
    non_torch: int,
    layers: int,
    per_token_per_layer: int,
    max_model_len: int,
) -> KvPlan:
    budget = math.ceil(cuda_total * utilization)
    non_kv = loaded_weights + activation_peak + non_torch
    available = budget - non_kv
    page = page_bytes(layers, per_token_per_layer)
    blocks = max(0, available // page)
    return KvPlan(budget, non_kv, available, page, blocks, max_model_len)


def estimate_max_model_len(era: Era, available: int, page: int, max_model_len: int) -> int:
    """Largest length whose KV fits, by binary search as vLLM does (0.33 keeps one block back)."""
    if era is Era.V0_33:
        available -= page
    lo, hi, best = 1, max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if needed_bytes(mid, page) <= available:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
