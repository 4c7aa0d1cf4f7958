"""The lab engine's non-KV memory against public vLLM start-up logs.

    .venv/bin/python bench/memory_check.py > bench/memory_check.txt

Each case is a public log that prints vLLM's whole memory split (vLLM 0.6.5 to 0.8, V0 worker:
"the current vLLM instance can use total_gpu_memory (T) x gpu_memory_utilization (U)" and "model
weights take W; non_torch_memory takes N; PyTorch activation peak memory takes A; the rest of the
memory reserved for KV Cache is K"), with the settings the log gives or the defaults of its
version. Those logs carry every term, so the activation peak can be checked on its own: the lab
engine's figure (vllmfacts/memory.py: activation_peak_bytes, the larger of one layer's MLP over
max_num_batched_tokens and the hidden states plus the sampler over max_num_seqs x vocabulary) is
compared with the logged one, then the KV memory it implies (T x U - W - N - lab A) with the
logged K. The non-torch term is taken from each log: it is the cuBLAS handles' memory, a
property of the GPU and its libraries, not of the model (vllmfacts/memory.py:
profile_non_torch_bytes).

The EKS start-failure write-up's two A10G runs (vLLM 0.19.1) print only "Model loading took" and
"Available KV cache memory"; they are the last two rows, as the lab engine computes them end to
end.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from labengine import core
from vllmfacts.gpu import GpuType, NodeGpus, gpu_types
from vllmfacts.memory import SAMPLER_BYTES_PER_LOGIT, estimate_max_model_len
from vllmfacts.models import ModelInfo, resolve
from vllmfacts.wording import Era

GIB = 2**30

# public configs (config.json on the Hugging Face hub) of models the lab does not ship
CONFIGS = {
    "Qwen/Qwen2.5-1.5B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"], "hidden_size": 1536, "intermediate_size": 8960,
        "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
        "vocab_size": 151936, "max_position_embeddings": 32768, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "model_type": "qwen2", "rope_theta": 1000000.0,
    },
}  # fmt: skip


@dataclass(frozen=True)
class Case:
    name: str
    url: str
    model: str
    dtype: str
    batched_tokens: int  # max_num_batched_tokens of the profiling run
    seqs: int  # max_num_seqs
    total: float  # GiB, as logged
    util: float
    weights: float
    non_torch: float
    activation: float
    kv: float
    note: str = ""
    tp: int = 1


LLAMA = "meta-llama/Llama-3.1-8B-Instruct"  # Llama-3-8B's and Llama-3.1-8B's shapes are one
CASES = [
    Case("Llama-3-8B H100 TP1 util 0.9", "https://github.com/vllm-project/vllm/pull/10511",
         LLAMA, "bfloat16", 8192, 256, 79.22, 0.90, 14.96, 1.79, 1.26, 53.29,
         "max_model_len 8192: no chunked prefill, 8192 batched tokens"),
    Case("Llama-3-8B H100 TP2 util 0.9 (rank 0)", "https://github.com/vllm-project/vllm/pull/10511",
         LLAMA, "bfloat16", 8192, 256, 79.22, 0.90, 7.48, 3.58, 1.26, 58.97,
         "KV not printed in the excerpt: T x U - W - N - A", tp=2),
    Case("Llama-3.1-8B H100 util 0.9", "public book excerpt (vLLM logs, Example 4-3)",
         LLAMA, "bfloat16", 8192, 256, 79.14, 0.90, 14.99, 0.12, 1.19, 54.93,
         "batched tokens not printed: 8192 assumed"),
    Case("Llama-3.1-8B 24 GB card util 0.9 len 131072",
         "public vLLM troubleshooting note (v0.8 V0 worker.py:266)",
         LLAMA, "bfloat16", 2048, 256, 22.07, 0.90, 14.99, 0.05, 0.22, 4.60,
         "chunked prefill on for len > 32K: 2048 batched tokens assumed"),
    Case("Qwen2.5-1.5B T4 util 0.5 len 32768", "public Colab log (v0.7 worker.py:267)",
         "Qwen/Qwen2.5-1.5B-Instruct", "float16", 32768, 256, 14.56, 0.50, 2.89, 0.01, 2.02,
         2.36, "T4: float16; len 32768 = batched tokens (no chunked prefill)"),
    Case("R1-Distill-Qwen-7B 32 GB card util 0.9 len 2048", "public log (v0.7 worker.py:266)",
         "Qwen/Qwen2.5-7B-Instruct", "bfloat16", 2048, 256, 31.74, 0.90, 14.27, 0.09, 1.40,
         12.80, "Qwen2.5-7B's shapes; len 2048: 2048 batched tokens"),
    Case("Qwen2.5-Math-1.5B 24 GB card util 0.9 len 4096", "public log (v0.7 worker.py:267)",
         "Qwen/Qwen2.5-1.5B-Instruct", "bfloat16", 4096, 256, 22.06, 0.90, 2.88, 0.05, 1.40,
         15.52, "Qwen2.5-1.5B's shapes; len 4096 = batched tokens"),
    Case("Qwen2.5-0.5B T4 util 0.9 len 32768", "public log (v0.6.6 worker.py:241)",
         "Qwen/Qwen2.5-0.5B-Instruct", "float16", 32768, 256, 14.56, 0.90, 0.93, 0.11, 1.44,
         10.63, "T4: float16; len 32768 = batched tokens"),
]  # fmt: skip


def model(tag: str, tmp: Path) -> ModelInfo:
    if tag not in CONFIGS:
        return resolve(tag)
    folder = tmp / tag
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIGS[tag]))
    return resolve(str(folder))


def pct(lab: float, public: float) -> str:
    return f"{(lab - public) / public * 100:+.1f} %"


def main() -> None:
    print(
        "case | source | public A GiB | lab A GiB | error | public KV GiB | lab KV GiB | error"
        " | sampler bytes per logit the log implies"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            m = model(c.model, Path(tmp))
            act = m.activation_peak_bytes(c.batched_tokens, c.seqs, c.dtype, c.tp) / GIB
            kv = c.total * c.util - c.weights - c.non_torch - act
            print(
                f"{c.name} | {c.url} | {c.activation:.2f} | {act:.2f} | {pct(act, c.activation)}"
                f" | {c.kv:.2f} | {kv:.2f} | {pct(kv, c.kv)} | {implied(m, c)}   ({c.note})"
            )
    seed_rows()


def implied(m: ModelInfo, c: Case) -> str:
    """The sampler's bytes per logit the logged peak implies, and which term sets the peak in
    the lab engine's formula."""
    h, vocab = int(m.config["hidden_size"]), int(m.config["vocab_size"])
    b = 2 if c.dtype in ("bfloat16", "float16") else 4
    forward = c.batched_tokens * (3 * int(m.config["intermediate_size"]) // c.tp + 4 * h) * b
    hidden = c.batched_tokens * h * b
    per_logit = (c.activation * GIB - hidden) / (min(c.seqs, c.batched_tokens) * vocab)
    sampler = hidden + min(c.seqs, c.batched_tokens) * vocab * SAMPLER_BYTES_PER_LOGIT
    return f"{per_logit:.1f} ({'sampler' if sampler > forward else 'forward'} peak)"


# the EKS start-failure write-up's runs: util, max len, available KV
SEED_RUNS = ((0.9, 4096, 9.1), (0.5, 16384, 0.18))
# What public logs of 24 GB cards (A10G/L4 class: nvidia-smi 23,028/23,034 MiB) print: total
# 22.06-22.07 GiB, non_torch_memory 0.05 GiB (the two "24 GB card" rows above).
PUBLIC_24GB_TOTAL_MIB, PUBLIC_24GB_NON_TORCH_MIB = 22589, 51
# An A10G's own total, as torch reports it in its CUDA out-of-memory message ("GPU 0 has a total
# capacity of 22.30 GiB"): two public 2026 write-ups, a fine-tuning job on SageMaker
# ml.g5.2xlarge and vLLM workers on an EKS g5.12xlarge. An older driver reported less: "22.20
# GiB total capacity" on a g5.12xlarge in 2023 (github.com/XavierXiao/Dreambooth-Stable-Diffusion
# issue 18).
PUBLIC_A10G_TOTAL_GIB = 22.30
PUBLIC_A10G_2023_TOTAL_MIB = 22733  # 22.20 GiB
PUBLIC_A10G_2023_SOURCE = "github.com/XavierXiao/Dreambooth-Stable-Diffusion/issues/18"


def seed_plan(gpu: GpuType, util: float, length: int) -> core.KvPlan:
    s = core.CoreSettings(
        era=Era.V0_19, model=resolve("Qwen/Qwen2.5-14B-Instruct-AWQ"), served_name="q",
        gpus=NodeGpus(gpu=gpu, installed=1, visible=(0,)), utilization=util,
        max_model_len=length, derived_max_len=32768.0, tp=1, pp=1, max_num_seqs=256,
        max_num_batched_tokens=2048, enforce_eager=False, nnodes=1, node_rank=0,
        master_addr="127.0.0.1", master_port=29501, time_scale=1.0, env={},
    )  # fmt: skip
    return core.memory_plan(s)


def seed_rows() -> None:
    """The EKS start-failure write-up's runs end to end: weights, the engine's activation and its
    A10G non-torch figure, against what vLLM 0.19.1 printed; then what the public 24 GB-card
    figures would give instead, and why the lab keeps the write-up's."""
    a10g = gpu_types()["a10g"]
    for util, length, public in SEED_RUNS:
        got = seed_plan(a10g, util, length).available / GIB
        print(
            f"seed A10G util {util} len {length} (0.19.1) | seeds/004 | - | - | - | {public:.2f}"
            f" | {got:.2f} | {pct(got, public)}   (A10G non-torch: what the seed leaves)"
        )
    alternatives = (
        ("public 24 GB figures", PUBLIC_24GB_TOTAL_MIB, "seeds/004"),
        ("2023 A10G total 22.20 GiB", PUBLIC_A10G_2023_TOTAL_MIB, PUBLIC_A10G_2023_SOURCE),
    )
    for label, total_mib, source in alternatives:
        alt = replace(
            a10g, cuda_total_mib=total_mib, profile_non_torch_mib=PUBLIC_24GB_NON_TORCH_MIB
        )
        for util, length, public in SEED_RUNS:
            p = seed_plan(alt, util, length)
            got = p.available / GIB
            est = estimate_max_model_len(Era.V0_19, p.available, p.page_bytes, length, p.layout)
            print(
                f"seed A10G util {util} len {length}, {label} | {source} | - | - | - "
                f"| {public:.2f} | {got:.2f} | {pct(got, public)}   ("
                + (
                    f"estimate {est}, the seed's 976; refused like the seed's run"
                    if not p.fits
                    else f"{p.tokens:,} tokens, the seed's 49,696"
                )
                + ")"
            )
    # Both runs have the same weights, activation and non-torch terms (max_num_batched_tokens
    # and max_num_seqs are the same; nothing in 0.19.1's profiling depends on the length or the
    # utilisation), so their available memories differ by (0.9 - 0.5) x total alone. vLLM rounds
    # each to 0.01 GiB, which bounds the total the write-up's GPU reported.
    lo = ((SEED_RUNS[0][2] - 0.005) - (SEED_RUNS[1][2] + 0.005)) / 0.4
    hi = ((SEED_RUNS[0][2] + 0.005) - (SEED_RUNS[1][2] - 0.005)) / 0.4
    print(
        f"\nThe seed's two runs put its A10G's CUDA total at {lo:.3f}-{hi:.3f} GiB (the lab uses "
        f"{a10g.cuda_total_mib / 1024:.3f}): inside the {PUBLIC_A10G_TOTAL_GIB:.2f} GiB that torch "
        "reports for an A10G in public 2026 logs (22.295-22.305 as printed). A 2023 driver "
        "reported 22.20 GiB, and public logs of other 24 GB cards show 22.06-22.07 GiB: with "
        "those the seed's runs give the figures above, refused alike. The non-torch term "
        f"({a10g.profile_non_torch_mib} MiB, the seed's AWQ model) is what the seed's runs leave "
        "once the public total, the weights and the activation formula are taken out; public "
        "logs show 0.05-0.12 GiB for unquantised models and 0.20-0.23 GiB for AWQ/Marlin ones."
    )


if __name__ == "__main__":
    main()
