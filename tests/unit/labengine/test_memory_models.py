"""The memory arithmetic on models the engine was not tuned to: dtype, fp8 KV, sliding-window
groups, MLA, the CUDA-graph estimate of 0.2x+, the A100's defaults, weights too large to load.

Expected figures are worked out by hand from vLLM 0.33.0's / 0.19.1's formulas (cited in
vllmfacts.memory and vllmfacts.models), not by the code under test."""

from __future__ import annotations

import io

import pytest

from labengine import core
from labengine.logs import VllmLog
from vllmfacts import memory
from vllmfacts.gpu import MIB, NodeGpus, gpu_types
from vllmfacts.models import DtypeError, cast_line, resolve, resolve_dtype
from vllmfacts.wording import Era

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
GEMMA2 = "google/gemma-2-9b"


def settings(model: str, gpu: str = "a10g", **kw: object) -> core.CoreSettings:
    m = resolve(model)
    g = gpu_types()[gpu]
    args: dict[str, object] = {
        "era": Era.V0_19,
        "model": m,
        "served_name": model,
        "gpus": NodeGpus(gpu=g, installed=1, visible=(0,)),
        "utilization": 0.9,
        "max_model_len": 4096,
        "derived_max_len": m.derived_max_len()[1],
        "tp": 1,
        "pp": 1,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 2048,
        "enforce_eager": False,
        "nnodes": 1,
        "node_rank": 0,
        "master_addr": "127.0.0.1",
        "master_port": 29501,
        "time_scale": 1e6,
        "env": {},
    }
    return core.CoreSettings(**{**args, **kw})  # type: ignore[arg-type]


# ---- dtype -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_type", "config_dtype", "requested", "expected"),
    [
        ("llama", "bfloat16", "auto", "bfloat16"),
        ("llama", "float32", "auto", "bfloat16"),  # float32 configs are down-cast
        ("llama", "bfloat16", "float32", "float32"),
        ("llama", "bfloat16", "float", "float32"),
        ("llama", "bfloat16", "half", "float16"),
        ("gemma2", "float32", "auto", "bfloat16"),
        ("gemma2", "float16", "auto", "bfloat16"),  # float16 is not offered to gemma2
        ("gemma2", "bfloat16", "float32", "float32"),
    ],
)
def test_dtype_resolution(
    model_type: str, config_dtype: str, requested: str, expected: str
) -> None:
    assert resolve_dtype(model_type, config_dtype, requested) == expected


def test_float16_for_gemma2_is_refused_in_vllms_words() -> None:
    with pytest.raises(DtypeError) as exc:
        resolve_dtype("gemma2", "bfloat16", "float16")
    assert str(exc.value) == (
        "The model type 'gemma2' does not support float16. "
        "Reason: Numerical instability. Please use bfloat16 or float32 instead."
    )
    with pytest.raises(DtypeError, match=r"^Unknown dtype: 'int8'$"):
        resolve_dtype("llama", "bfloat16", "int8")


def test_gemma2_float32_config_loads_in_bf16() -> None:
    m = resolve(GEMMA2)
    assert (m.config_dtype, m.dtype) == ("float32", "bfloat16")
    assert m.weight_bytes() == 9_241_705_984 * 2


def test_float32_weights_take_four_bytes_per_parameter() -> None:
    m = resolve(LLAMA)
    assert m.weight_bytes() == 16_060_522_496  # the checkpoint's own bf16 files
    assert m.weight_bytes("float32") == 8_030_261_248 * 4
    assert m.kv_bytes_per_token_per_layer(dtype="float32") == 2 * 8 * 128 * 4


def test_float32_llama_8b_runs_out_of_memory_while_loading_on_an_a10g() -> None:
    stream = io.StringIO()
    s = settings(LLAMA, dtype="float32")
    with pytest.raises(core.EngineStartError) as exc:
        core._load_weights(s, VllmLog("EngineCore", stream), None)
    assert exc.value.exc_type == "torch.OutOfMemoryError"
    # one layer's share of 32,121,044,992 bytes is 1,003,782,656 bytes (957.28 MiB); 22 of them
    # fit beside the 1,240 MiB of non-torch memory, leaving 537.80 MiB
    assert exc.value.message.startswith(
        "CUDA out of memory. Tried to allocate 957.28 MiB. GPU 0 has a total capacity of "
        "22.30 GiB of which 537.80 MiB is free. Including non-PyTorch memory, this process has "
        "21.78 GiB memory in use. Of the allocated memory 20.57 GiB is allocated by PyTorch,"
    )
    assert "Loading weights took" not in stream.getvalue()
    assert "Starting to load model" in stream.getvalue()
    core._load_weights(settings(LLAMA), VllmLog("EngineCore", io.StringIO()), None)  # bf16 fits


def test_a_131_gib_model_does_not_load_on_one_h100() -> None:
    s = settings("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100")
    with pytest.raises(core.EngineStartError, match="CUDA out of memory"):
        core._load_weights(s, VllmLog("EngineCore", io.StringIO()), None)
    # across 2 ranks each loads 43.5 GiB, which fits
    core._load_weights(
        settings("mistralai/Mixtral-8x7B-Instruct-v0.1", gpu="h100", tp=2),
        VllmLog("EngineCore", io.StringIO()),
        None,
    )


# ---- KV bytes per token --------------------------------------------------------------------


def test_fp8_kv_cache_halves_bytes_per_token() -> None:
    m = resolve(LLAMA)
    assert m.kv_bytes_per_token_per_layer() == 4096  # 2 x 8 heads x 128 x 2 bytes
    assert m.kv_bytes_per_token_per_layer(kv_cache_dtype="fp8") == 2048
    auto = core.memory_plan(settings(LLAMA, gpu="h100"))
    fp8 = core.memory_plan(settings(LLAMA, gpu="h100", kv_cache_dtype="fp8"))
    assert fp8.page_bytes * 2 == auto.page_bytes == 16 * 32 * 4096
    assert fp8.num_blocks in (2 * auto.num_blocks, 2 * auto.num_blocks + 1)


def test_mla_kv_is_the_latent_not_heads_times_dim() -> None:
    m = resolve("deepseek-ai/DeepSeek-V2-Lite")
    assert m.is_mla
    assert m.kv_bytes_per_token_per_layer() == (512 + 64) * 2
    assert m.kv_bytes_per_token_per_layer(tp=2) == (512 + 64) * 2  # not split across ranks


# ---- sliding window and hybrid models -----------------------------------------------------


def gemma2_plan(era: Era, in_flight: int) -> memory.KvPlan:
    # 42 layers: 21 sliding (window 4096), 21 full; 8 KV heads x 256 x 2 x bf16 = 8192 B
    return memory.plan(
        cuda_total=10 * 2**30,
        utilization=1.0,
        loaded_weights=0,
        activation_peak=0,
        non_torch=0,
        layers=42,
        per_token_per_layer=8192,
        max_model_len=8192,
        sliding_layers=21,
        sliding_window=4096,
        max_in_flight_tokens=in_flight,
        era=era,
    )


def test_gemma2_layers_split_into_two_groups_of_21() -> None:
    m = resolve(GEMMA2)
    assert (m.num_layers, m.sliding_layers(), m.sliding_window) == (42, 21, 4096)
    p = gemma2_plan(Era.V0_19, 2048)
    assert p.layout.groups() == [False, True]
    assert p.page_bytes == 21 * 16 * 8192  # 2,752,512: a block spans one group's layers
    assert p.num_blocks == 3900  # 10 GiB // 2,752,512


def test_gemma2_tokens_and_concurrency() -> None:
    # a request takes 8192/16 = 512 full blocks and cdiv(4095 + 2048, 16) + 1 = 385 sliding ones
    p19 = gemma2_plan(Era.V0_19, 2048)
    assert p19.concurrency == 3900 / 897
    assert p19.tokens == 3900 // 2 * 16  # 31,200: the blocks shared among two groups
    p33 = gemma2_plan(Era.V0_33, 2048)
    assert p33.tokens == 35_617  # int(3900 / 897 * 8192)
    # needed: 21 layers x 512 pages + 21 layers x 385 pages, 131,072 bytes each
    assert p19.needed == 21 * (512 + 385) * 131_072
    # with 8192 tokens in flight the window covers the whole length: 513 sliding blocks
    assert gemma2_plan(Era.V0_19, 8192).concurrency == 3900 / 1025


def test_uneven_layer_types_group_by_the_smaller_count() -> None:
    # 10 full + 20 sliding: groups of 10, one full group and two sliding ones
    layout = memory.KvLayout(
        full_layers=10, per_token_per_layer=4, sliding_layers=20, sliding_window=64
    )
    assert layout.groups() == [False, True, True]
    assert layout.page_bytes == 10 * 16 * 4
    # 12 sliding + 13 full: under 1.5x, so groups of 13 (one padded)
    assert memory.KvLayout(13, 4, 12, 64).groups() == [False, True]
    assert memory.KvLayout(13, 4, 12, 64).page_bytes == 13 * 16 * 4


def test_hybrid_estimate_counts_the_window() -> None:
    # 1 full + 1 sliding layer (window 32), 1 byte/token/layer: a page is 16 bytes per layer
    layout = memory.KvLayout(1, 1, 1, 32, 0)
    # at length 100: 7 full pages + (cdiv(min(31, 100), 16) + 1) = 3 sliding pages = 160 bytes
    assert layout.needed(100) == 160
    assert memory.estimate_max_model_len(Era.V0_19, 160, 16, 1000, layout) == 112
    # 112 tokens: 7 + 3 pages; 113: 8 + 3 = 176 bytes, over


# ---- the budget ----------------------------------------------------------------------------


def test_cudagraph_estimate_is_taken_from_the_budget_in_033_only() -> None:
    graphs = 848_256_041  # the EKS start-failure write-up's capture (gameday-lab.json)
    s19 = settings(QWEN)
    s33 = settings(QWEN, era=Era.V0_33)
    assert core.cudagraph_estimate(s19) == 0
    assert core.cudagraph_estimate(s33) == graphs
    # 0.33 takes the estimate from the budget, and does not count the A10G's 181 MiB of
    # cuBLAS handles (it creates them before the init snapshot)
    assert core.memory_plan(s19).available - core.memory_plan(s33).available == (
        graphs - 181 * 2**20
    )
    off = settings(QWEN, era=Era.V0_33, env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"})
    assert core.cudagraph_estimate(off) == 0
    assert core.cudagraph_estimate(settings(QWEN, era=Era.V0_33, enforce_eager=True)) == 0


def test_cudagraph_log_line_is_vllms() -> None:
    stream = io.StringIO()
    core._log_cudagraph_estimate(settings(QWEN, era=Era.V0_33), VllmLog("EngineCore", stream))
    # 848,256,041 / (22,838 MiB) = 0.035422...
    assert stream.getvalue().split("] ", 1)[1].rstrip("\n") == (
        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        "--gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8646 "
        "without CUDA graph memory profiling. To maintain the same effective KV cache size as "
        "before, increase --gpu-memory-utilization to 0.9354. To disable, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
    )


def test_negative_available_memory_is_printed_negative() -> None:
    stream = io.StringIO()
    s = settings(QWEN, utilization=0.4, time_scale=1e9)
    with pytest.raises(core.EngineStartError, match="No available memory"):
        core._profile(s, VllmLog("EngineCore", stream))
    # 0.4 x 22,838 MiB = 8.92 GiB budget, less weights 9.38 GiB and the rest: below zero
    line = next(ln for ln in stream.getvalue().splitlines() if "Available KV cache" in ln)
    assert line.split("] ", 1)[1].startswith("Available KV cache memory: -")


def test_033_check_holds_back_one_block() -> None:
    p = memory.plan(
        cuda_total=1000,
        utilization=1.0,
        loaded_weights=0,
        activation_peak=0,
        non_torch=0,
        layers=2,
        per_token_per_layer=3,
        max_model_len=48,
        era=Era.V0_33,
    )
    # 1000 available, one 96-byte block held back: 904 >= 288 needed
    assert (p.available, p.check_available, p.fits) == (1000, 904, True)


def test_a100_does_not_take_the_large_gpu_defaults() -> None:
    # vllm/engine/arg_utils.py: device_memory >= 70 GiB and "a100" not in the device name
    assert gpu_types()["a100-80g"].large is False
    assert gpu_types()["h100"].large is True
    assert gpu_types()["a100-80g"].memory_mib * MIB >= 70 * 2**30


def test_cudagraph_estimate_disabled_warns_as_vllm_does() -> None:
    stream = io.StringIO()
    env = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    core._log_cudagraph_estimate(
        settings(QWEN, era=Era.V0_33, env=env), VllmLog("EngineCore", stream)
    )
    assert stream.getvalue().split("] ", 1)[1].rstrip("\n") == (
        "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). "
        "Without it, CUDA graph memory is not accounted for during KV cache allocation, which "
        "may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it "
        "(the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9000 to "
        "0.9354."
    )
    quiet = io.StringIO()
    core._log_cudagraph_estimate(settings(QWEN), VllmLog("EngineCore", quiet))  # 0.19: nothing
    assert quiet.getvalue() == ""


def test_seed_shortage_in_033_has_no_memory_left_after_the_graph_estimate() -> None:
    # 0.18 GiB available in 0.19 (the EKS start-failure write-up), plus the 181 MiB of cuBLAS
    # handles 0.33 does not count, less the 0.79 GiB estimate: below zero
    p = core.memory_plan(settings(QWEN, era=Era.V0_33, utilization=0.5, max_model_len=16384))
    assert round(p.available / 2**30, 2) == -0.43
    assert p.fits is False


@pytest.mark.parametrize(
    ("config_dtype", "dtype", "expected"),
    [
        ("float32", "bfloat16", ("info", "Downcasting torch.float32 to torch.bfloat16.")),
        ("bfloat16", "float32", ("info", "Upcasting torch.bfloat16 to torch.float32.")),
        ("float16", "bfloat16", ("warning", "Casting torch.float16 to torch.bfloat16.")),
        ("bfloat16", "bfloat16", None),
    ],
)
def test_cast_lines_are_vllms(
    config_dtype: str, dtype: str, expected: tuple[str, str] | None
) -> None:
    assert cast_line(config_dtype, dtype) == expected


@pytest.mark.parametrize(
    ("era", "env", "lines"),
    [
        (
            Era.V0_19,
            {},
            [
                "[gpu_model_runner.py:4735] Starting to load model Qwen/Qwen2.5-0.5B-Instruct...",
                "[gpu_model_runner.py:4820] Model loading took",
            ],
        ),
        # 0.33 runs Model Runner V2 on CUDA by default (VllmConfig.use_v2_model_runner)
        (
            Era.V0_33,
            {},
            [
                "[model_runner.py:399] Loading model from scratch...",
                "[model_runner.py:428] Model loading took",
            ],
        ),
        (
            Era.V0_33,
            {"VLLM_USE_V2_MODEL_RUNNER": "0"},
            [
                "[gpu_model_runner.py:4978] Starting to load model Qwen/Qwen2.5-0.5B-Instruct...",
                "[gpu_model_runner.py:5088] Model loading took",
            ],
        ),
    ],
)
def test_the_loading_lines_are_the_model_runners_of_the_era(
    era: Era, env: dict[str, str], lines: list[str]
) -> None:
    stream = io.StringIO()
    core._load_weights(
        settings("Qwen/Qwen2.5-0.5B-Instruct", era=era, env=env),
        VllmLog("EngineCore", stream),
        None,
    )
    out = stream.getvalue()
    at = [out.find(line) for line in lines]
    assert all(i >= 0 for i in at) and at == sorted(at), out
    other = "Loading model from scratch" if era is Era.V0_19 or env else "Starting to load model"
    assert other not in out


# ---- CUDA-graph capture after the KV cache ----------------------------------------------------


def _start(s: core.CoreSettings) -> str:
    out = io.StringIO()
    log = VllmLog("EngineCore", out, s.era)
    plan = core._profile(s, log)
    core._capture_graphs(s, log, plan, None)
    return out.getvalue()


def test_019_puts_the_graphs_on_top_of_the_budget() -> None:
    """Qwen2.5-14B-AWQ on the A10G (22,838 MiB to CUDA): the KV cache takes what the budget
    leaves of the weights (9.38 GiB), the activation peak and 181 MiB of cuBLAS; the peak is
    released, the 1,240 MiB CUDA context is outside the budget: 0.9 leaves 2,675.5 MiB for the
    0.79 GiB (809 MiB) of graphs, 0.98 leaves 848.5 MiB, 0.99 only 620.5 MiB."""
    for util, headroom_mib in ((0.9, 2675.5), (0.98, 848.5), (0.99, 620.5)):
        s = settings(QWEN, utilization=util)
        assert core.graph_headroom(s, core.memory_plan(s)) / MIB == pytest.approx(
            headroom_mib, abs=0.1
        )
    assert "Graph capturing finished in 9 secs, took 0.79 GiB" in _start(
        settings(QWEN, utilization=0.98)
    )


def test_019_runs_out_of_memory_two_thirds_through_capture() -> None:
    s = settings(QWEN, utilization=0.99)
    out = io.StringIO()
    log = VllmLog("EngineCore", out, s.era)
    plan = core._profile(s, log)
    with pytest.raises(core.EngineStartError) as exc:
        core._capture_graphs(s, log, plan, None)
    # 809 MiB / 67 sizes = 12.07 MiB, rounded up to whole 2 MiB segments: 14 MiB; 44 fit in
    # 620.55 MiB, leaving 4.55 MiB
    assert exc.value.exc_type == "torch.OutOfMemoryError"
    assert exc.value.message.startswith(
        "CUDA out of memory. Tried to allocate 14.00 MiB. GPU 0 has a total capacity of "
        "22.30 GiB of which 4.55 MiB is free."
    )
    assert "Available KV cache memory: 11.11 GiB" in out.getvalue()
    assert "PIECEWISE):  66%|██████▌   | 44/67" in out.getvalue()
    assert "Graph capturing finished" not in out.getvalue()


def test_eager_mode_captures_nothing_at_099() -> None:
    assert "Graph capturing" not in _start(settings(QWEN, utilization=0.99, enforce_eager=True))


def test_033_takes_the_graphs_from_the_budget_unless_told_not_to() -> None:
    on = settings(QWEN, era=Era.V0_33, utilization=0.99)
    assert "Graph capturing finished" in _start(on)
    off = settings(
        QWEN, era=Era.V0_33, utilization=0.99, env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
    )
    with pytest.raises(core.EngineStartError, match=r"of which 6\.55 MiB is free"):
        _start(off)
