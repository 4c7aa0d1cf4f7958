"""vLLM's start-up memory arithmetic (vllm/v1/worker/gpu_worker.py, vllm/v1/core/kv_cache_utils.py).

Pure functions; the EKS start-failure write-up's numbers are unit-tested against them.

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

from vllmfacts.wording import Era

BLOCK_SIZE = 16
# vLLM's CPU platform's default block size (vllm/platforms/cpu.py, check_and_update_config:
# `cache_config.block_size = 128` when none is given)
CPU_BLOCK_SIZE = 128

# Bytes the sampler's profiling run holds at its peak per (request x vocabulary) logit: the logits
# in the model's dtype, their fp32 copy, the top-k/top-p pass over them (sorted fp32 values and
# int64 indices, softmax, cumsum, masks, the scatter back) and the probabilities. Checked against
# eight public start-up logs that print vLLM's whole memory split: the five where the sampler sets
# the peak imply 36.9 to 39.2 bytes (bench/memory_check.py, bench/memory_check.txt).
SAMPLER_BYTES_PER_LOGIT = 38.5


def activation_peak_bytes(
    *,
    tokens: int,
    seqs: int,
    hidden: int,
    intermediate: int,
    vocab: int,
    dtype_bytes: int,
    tp: int = 1,
) -> int:
    """The torch peak of vLLM's profiling run (gpu_model_runner.py: profile_run): a dummy
    forward pass of `tokens` = max_num_batched_tokens, then the sampler on the last token of
    min(max_num_seqs, tokens) requests (_dummy_sampler_run). The two do not overlap:

        forward  = tokens x (3 x intermediate / tp + 4 x hidden) x dtype_bytes
                   (one decoder layer's MLP: its input, the residual, gate_up (2 x I), the
                   activation (I) and down's output (H); the MLP is column/row parallel)
        sampler  = tokens x hidden x dtype_bytes                  (the hidden states, still held)
                 + requests x vocab x SAMPLER_BYTES_PER_LOGIT      (full vocabulary on every rank)
        peak     = max(forward, sampler)
    """
    forward = tokens * (3 * intermediate // tp + 4 * hidden) * dtype_bytes
    requests = min(seqs, tokens)
    sampler = tokens * hidden * dtype_bytes + int(requests * vocab * SAMPLER_BYTES_PER_LOGIT)
    return max(forward, sampler)


def profile_non_torch_bytes(era: Era, cublas_mib: int) -> int:
    """Memory outside PyTorch's allocator that the profiling counts (gpu_worker.py:
    determine_available_memory, utils/mem_utils.py: memory_profiling's non_torch_increase): what
    appeared after the worker's init snapshot. The CUDA context and NCCL's buffers are created
    before it, whatever the TP size, so they are never counted. In 0.19 the cuBLAS and cuBLASLt
    handles (their workspaces and kernel modules) are created by the first matmul, after the
    snapshot: `cublas_mib`, a property of the GPU and its libraries (vllmfacts/data/gpus.json).
    From 0.2x on the worker runs one matmul and one linear before the snapshot ("Create the
    handles now, before the snapshot, so they count as baseline like the NCCL buffers"), so
    nothing is counted."""
    return cublas_mib * 2**20 if era is Era.V0_19 else 0


@dataclass(frozen=True)
class KvLayout:
    """The KV cache's shape on one rank: how many layers attend fully and over a sliding window,
    and the bytes one token takes in one layer."""

    full_layers: int
    per_token_per_layer: int
    sliding_layers: int = 0
    sliding_window: int = 0
    max_in_flight_tokens: int = 0  # VllmConfig.max_in_flight_tokens: max_num_batched_tokens
    block_size: int = BLOCK_SIZE

    @property
    def layer_page(self) -> int:
        return self.block_size * self.per_token_per_layer

    def groups(self) -> list[bool]:
        """One entry per KV cache group, True for a sliding-window group
        (vllm/v1/core/kv_cache_planning.py: _get_kv_cache_groups_uniform_page_size: groups of
        `group_size` layers, the smallest type's count unless the largest is under 1.5x it)."""
        kinds = [(False, self.full_layers), (True, self.sliding_layers)]
        kinds = [(k, n) for k, n in kinds if n > 0]
        if not kinds:
            return []
        lo, hi = min(n for _, n in kinds), max(n for _, n in kinds)
        size = hi if hi < lo * 1.5 else lo
        return [k for k, n in kinds for _ in range(math.ceil(n / size))]

    @property
    def group_size(self) -> int:
        kinds = [n for n in (self.full_layers, self.sliding_layers) if n > 0]
        lo, hi = min(kinds), max(kinds)
        return hi if hi < lo * 1.5 else lo

    @property
    def page_bytes(self) -> int:
        """Bytes of one block across a group (kv_cache_planning.py:
        _get_kv_cache_bytes_per_block); for a full-attention model, all its layers."""
        return self.group_size * self.layer_page

    def blocks_per_request(self, sliding: bool, max_model_len: int) -> int:
        """kv_cache_interface.py: FullAttentionSpec / SlidingWindowSpec.max_memory_usage_bytes
        in pages: a sliding layer holds the window plus the tokens in flight, and one block
        more for a window that starts mid-block."""
        if not sliding:
            return math.ceil(max_model_len / self.block_size)
        tokens = min(self.sliding_window - 1 + self.max_in_flight_tokens, max_model_len)
        return math.ceil(tokens / self.block_size) + 1

    def needed(self, max_model_len: int) -> int:
        """kv_cache_planning.py: max_memory_usage_bytes summed over every layer."""
        full = self.full_layers * self.blocks_per_request(False, max_model_len)
        sliding = self.sliding_layers * self.blocks_per_request(True, max_model_len)
        return (full + (sliding if self.sliding_layers else 0)) * self.layer_page


@dataclass(frozen=True)
class KvPlan:
    budget: int
    non_kv: int
    available: int
    layout: KvLayout
    num_blocks: int
    max_model_len: int
    era: Era = Era.V0_19

    @property
    def page_bytes(self) -> int:
        return self.layout.page_bytes

    @property
    def check_available(self) -> int:
        """What the start-up check compares with: 0.33 first holds back the pool's null block
        (kv_cache_planning.py: check_enough_kv_cache_memory, _pool_bytes_per_block)."""
        return self.available - (self.page_bytes if self.era is Era.V0_33 else 0)

    @property
    def concurrency(self) -> float:
        """kv_cache_utils.py: get_max_concurrency_for_kv_cache_config: blocks over the blocks a
        max-length request takes in every group."""
        per_request = sum(
            self.layout.blocks_per_request(g, self.max_model_len) for g in self.layout.groups()
        )
        return self.num_blocks / per_request if per_request else 0.0

    @property
    def tokens(self) -> int:
        """The logged "GPU KV cache size": 0.19 divides the blocks among the groups
        (kv_cache_utils.py: get_kv_cache_configs); 0.33 takes concurrency x max_model_len
        (get_kv_cache_capacity)."""
        if self.era is Era.V0_33:
            return int(self.concurrency * self.max_model_len)
        return self.num_blocks // max(1, len(self.layout.groups())) * self.layout.block_size

    @property
    def needed(self) -> int:
        return self.layout.needed(self.max_model_len)

    @property
    def fits(self) -> bool:
        return self.check_available > 0 and self.needed <= self.check_available


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
    sliding_layers: int = 0,
    sliding_window: int = 0,
    max_in_flight_tokens: int = 0,
    cudagraph: int = 0,
    era: Era = Era.V0_19,
) -> KvPlan:
    """`layers` counts every attention layer, `sliding_layers` those of them over a window.
    `cudagraph` is the CUDA-graph estimate that 0.2x+ takes from the KV budget
    (gpu_worker.py: determine_available_memory, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)."""
    budget = math.ceil(cuda_total * utilization)
    non_kv = loaded_weights + activation_peak + non_torch + cudagraph
    available = budget - non_kv
    layout = KvLayout(
        full_layers=layers - sliding_layers,
        per_token_per_layer=per_token_per_layer,
        sliding_layers=sliding_layers,
        sliding_window=sliding_window,
        max_in_flight_tokens=max_in_flight_tokens,
    )
    blocks = max(0, available // layout.page_bytes)
    return KvPlan(budget, non_kv, available, layout, blocks, max_model_len, era)


def estimate_max_model_len(
    era: Era, available: int, page: int, max_model_len: int, layout: KvLayout | None = None
) -> int:
    """Largest length whose KV fits, by binary search as vLLM does (kv_cache_planning.py:
    estimate_max_model_len; 0.33 keeps one block back). With a layout, its own needs per
    length (sliding layers included); without, `page` covers every layer."""
    if era is Era.V0_33:
        available -= page
    lo, hi, best = 1, max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        need = layout.needed(mid) if layout else needed_bytes(mid, page)
        if need <= available:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def cpu_plan(
    *, kv_cache_bytes: int, layers: int, per_token_per_layer: int, max_model_len: int, era: Era
) -> KvPlan:
    """The KV cache on vLLM's CPU platform: the budget is what VLLM_CPU_KVCACHE_SPACE (or
    --kv-cache-memory-bytes) sets, whole (vllm/v1/worker/cpu_worker.py,
    determine_available_memory: "Explicitly set (A/T) GiB for KV cache"), nothing taken off
    for weights or activations; blocks of CPU_BLOCK_SIZE tokens."""
    layout = KvLayout(
        full_layers=layers, per_token_per_layer=per_token_per_layer, block_size=CPU_BLOCK_SIZE
    )
    blocks = max(0, kv_cache_bytes // layout.page_bytes)
    return KvPlan(kv_cache_bytes, 0, kv_cache_bytes, layout, blocks, max_model_len, era)
