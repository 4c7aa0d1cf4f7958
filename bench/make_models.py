"""Write the lab engine's model directories: the real config.json of each model and a
`model.safetensors.index.json` in Hugging Face's format whose tensor list and `total_size` are
computed from the architecture (dtype and shape of every tensor, AWQ packing included).

Run once by a developer (`python bench/make_models.py`); the output is committed. The engine reads
these files at start-up exactly as vLLM reads a model repository's; nothing about a model is a
constant in the engine's code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "vllmfacts" / "models"

CONFIGS: dict[str, dict[str, object]] = {
    "Qwen/Qwen2.5-14B-Instruct-AWQ": {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "initializer_range": 0.02,
        "intermediate_size": 13824,
        "max_position_embeddings": 32768,
        "max_window_layers": 70,
        "model_type": "qwen2",
        "num_attention_heads": 40,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "quantization_config": {
            "bits": 4,
            "group_size": 128,
            "modules_to_not_convert": None,
            "quant_method": "awq",
            "version": "gemm",
            "zero_point": True,
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "transformers_version": "4.41.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 152064,
    },
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "hidden_act": "silu",
        "hidden_size": 896,
        "initializer_range": 0.02,
        "intermediate_size": 4864,
        "max_position_embeddings": 32768,
        "max_window_layers": 21,
        "model_type": "qwen2",
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.43.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    "meta-llama/Llama-3.1-8B-Instruct": {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 14336,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.42.3",
        "use_cache": True,
        "vocab_size": 128256,
    },
}

# Qwen2 has q/k/v biases; Llama has none.
BIASED_QKV = {"qwen2"}


def tensors(cfg: dict[str, object]) -> list[tuple[str, str, list[int]]]:
    """(name, dtype, shape) of every tensor, as the checkpoint stores them."""
    h = int(cfg["hidden_size"])  # type: ignore[call-overload]
    inter = int(cfg["intermediate_size"])  # type: ignore[call-overload]
    layers = int(cfg["num_hidden_layers"])  # type: ignore[call-overload]
    heads = int(cfg["num_attention_heads"])  # type: ignore[call-overload]
    kv = int(cfg["num_key_value_heads"])  # type: ignore[call-overload]
    vocab = int(cfg["vocab_size"])  # type: ignore[call-overload]
    head_dim = h // heads
    dtype = "F16" if cfg["torch_dtype"] == "float16" else "BF16"
    quant = cfg.get("quantization_config")
    out: list[tuple[str, str, list[int]]] = [("model.embed_tokens.weight", dtype, [vocab, h])]
    linears = {
        "self_attn.q_proj": (h, heads * head_dim),
        "self_attn.k_proj": (h, kv * head_dim),
        "self_attn.v_proj": (h, kv * head_dim),
        "self_attn.o_proj": (heads * head_dim, h),
        "mlp.gate_proj": (h, inter),
        "mlp.up_proj": (h, inter),
        "mlp.down_proj": (inter, h),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, (fin, fout) in linears.items():
            if isinstance(quant, dict) and quant.get("quant_method") == "awq":
                bits = int(quant["bits"])
                group = int(quant["group_size"])
                pack = 32 // bits
                out.append((p + name + ".qweight", "I32", [fin, fout // pack]))
                out.append((p + name + ".qzeros", "I32", [fin // group, fout // pack]))
                out.append((p + name + ".scales", "F16", [fin // group, fout]))
            else:
                out.append((p + name + ".weight", dtype, [fout, fin]))
            if cfg["model_type"] in BIASED_QKV and name in (
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
            ):
                out.append((p + name + ".bias", dtype, [fout]))
        out.append((p + "input_layernorm.weight", dtype, [h]))
        out.append((p + "post_attention_layernorm.weight", dtype, [h]))
    out.append(("model.norm.weight", dtype, [h]))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", dtype, [vocab, h]))
    return out


SIZES = {"F16": 2, "BF16": 2, "I32": 4, "F32": 4}
SHARD_BYTES = 4_000_000_000


def main() -> None:
    for model, cfg in CONFIGS.items():
        d = ROOT / model
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        ts = tensors(cfg)
        sizes = [(n, SIZES[dt] * math.prod(shape)) for n, dt, shape in ts]
        total = sum(s for _, s in sizes)
        shards = max(1, math.ceil(total / SHARD_BYTES))
        weight_map: dict[str, str] = {}
        acc = 0
        for name, size in sizes:
            idx = min(shards, acc * shards // total + 1)
            weight_map[name] = f"model-{idx:05d}-of-{shards:05d}.safetensors"
            acc += size
        if shards == 1:
            weight_map = {n: "model.safetensors" for n in weight_map}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
        print(f"{model}: {len(ts)} tensors, {total:,} bytes = {total / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
