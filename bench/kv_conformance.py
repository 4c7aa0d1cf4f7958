"""The lab engine's KV arithmetic against vLLM 0.33.0's own functions, over a grid.

vLLM's KV planning imports without a GPU. In a separate venv (never this project's):

    python3 -m venv /tmp/vv && /tmp/vv/bin/pip install torch==2.13.0
    /tmp/vv/bin/pip install --no-deps vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
    /tmp/vv/bin/pip install <the modules the import asks for: pydantic, transformers, cbor2, ...>
    VLLM_TARGET_DEVICE=cpu PYTHONPATH=. /tmp/vv/bin/python bench/kv_conformance.py

It builds each model's per-layer KV specs as vLLM's attention layers declare them (full, sliding
window, MLA) and compares, case by case: the blocks (kv_cache_planning.py:
get_kv_cache_config_from_groups), the KV cache groups, the concurrency and tokens
(kv_cache_utils.py: get_kv_cache_capacity), the bytes one max-length request needs
(max_memory_usage_bytes) and the length estimate (estimate_max_model_len after the null block).
The latest output is bench/kv_conformance.txt.
"""

from __future__ import annotations

import itertools
import types
from typing import Any

import torch
from vllm.v1.core import kv_cache_planning as planning
from vllm.v1.core import kv_cache_utils as utils
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec

from vllmfacts import memory
from vllmfacts.models import ModelInfo, resolve
from vllmfacts.wording import Era

MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "microsoft/Phi-3-mini-4k-instruct",
    "google/gemma-7b",
    "google/gemma-2-9b",
    "google/gemma-2-2b-it",
    "deepseek-ai/DeepSeek-V2-Lite",
    "Qwen/Qwen2.5-14B-Instruct-AWQ",
]


def vllm_config(max_len: int, batched: int) -> Any:
    """The fields of VllmConfig that the KV planning reads (FlashAttention's LBNHC layout)."""
    ns = types.SimpleNamespace
    cache = ns(
        num_gpu_blocks_override=None,
        prefix_cache_retention_interval=None,
        kv_cache_layout="LBNHC",
        get_resolved_kv_cache_layout=lambda: planning.KVCacheLayout.LBNHC,
    )
    return ns(
        model_config=ns(max_model_len=max_len),
        parallel_config=ns(decode_context_parallel_size=1, prefill_context_parallel_size=1),
        max_in_flight_tokens=batched,
        attention_config=ns(hisparse_config=None),
        cache_config=cache,
        device_config=ns(device_type="cuda"),
        scheduler_config=ns(max_num_batched_tokens=batched, disable_hybrid_kv_cache_manager=False),
    )


def layer_specs(m: ModelInfo, kv_dtype: str) -> dict[str, Any]:
    dt = torch.float8_e4m3fn if kv_dtype == "fp8" else torch.bfloat16
    n, sliding = m.num_layers, m.sliding_layers()
    kinds = m.config.get("layer_types") or [
        "sliding_attention" if sliding and i % 2 == 0 else "full_attention" for i in range(n)
    ]
    out: dict[str, Any] = {}
    for i, kind in enumerate(kinds):
        if m.is_mla:
            latent = int(m.config["kv_lora_rank"]) + int(m.config["qk_rope_head_dim"])
            out[f"l{i}"] = MLAAttentionSpec(
                block_size=16, num_kv_heads=1, head_size=latent, dtype=dt
            )
        elif kind == "sliding_attention":
            out[f"l{i}"] = SlidingWindowSpec(
                block_size=16,
                num_kv_heads=m.num_kv_heads,
                head_size=m.head_dim,
                dtype=dt,
                sliding_window=m.sliding_window,
            )
        else:
            out[f"l{i}"] = FullAttentionSpec(
                block_size=16, num_kv_heads=m.num_kv_heads, head_size=m.head_dim, dtype=dt
            )
    return out


def case(tag: str, max_len: int, batched: int, avail: int, kv_dtype: str) -> tuple[Any, Any]:
    m = resolve(tag)
    vc = vllm_config(max_len, batched)
    specs = layer_specs(m, kv_dtype)
    groups = planning.get_kv_cache_groups(vc, dict(specs))
    kc = planning.get_kv_cache_config_from_groups(vc, groups, avail)
    tokens, conc = utils.get_kv_cache_capacity(vc, kc)
    need = planning.max_memory_usage_bytes(vc, specs.values())
    held_back = avail - planning._pool_bytes_per_block(vc, groups)
    est = planning.estimate_max_model_len(vc, specs, held_back)
    p = memory.plan(
        cuda_total=avail,
        utilization=1.0,
        loaded_weights=0,
        activation_peak=0,
        non_torch=0,
        layers=m.num_layers,
        per_token_per_layer=m.kv_bytes_per_token_per_layer(kv_cache_dtype=kv_dtype),
        max_model_len=max_len,
        sliding_layers=m.sliding_layers(),
        sliding_window=m.sliding_window,
        max_in_flight_tokens=batched,
        era=Era.V0_33,
    )
    lab_est = memory.estimate_max_model_len(Era.V0_33, p.available, p.page_bytes, max_len, p.layout)
    ours = (p.num_blocks, len(p.layout.groups()), round(p.concurrency, 6), p.tokens, p.needed)
    theirs = (kc.num_blocks, len(groups), round(conc, 6), tokens, need)
    return (*theirs, est), (*ours, lab_est)


def main() -> None:
    print(
        "case | vLLM 0.33.0 (blocks, groups, concurrency, tokens, needed, estimate) | lab | equal"
    )
    diffs = total = 0
    grid = itertools.product(MODELS, [4000, 8192], [2048, 8192], [0.5, 3.0, 17.3], ["auto", "fp8"])
    for tag, max_len, batched, gib, kv_dtype in grid:
        theirs, ours = case(tag, max_len, batched, int(gib * 2**30), kv_dtype)
        total += 1
        diffs += theirs != ours
        name = f"{tag} len={max_len} batched={batched} kv={gib}GiB kv_dtype={kv_dtype}"
        print(f"{name} | {theirs} | {ours} | {'yes' if theirs == ours else 'NO'}")
    print(f"{total} cases, {diffs} differences")


if __name__ == "__main__":
    main()
