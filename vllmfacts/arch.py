"""A model's size from its architecture, for a folder that holds only `config.json`.

Counts every tensor the checkpoint of a supported architecture holds (the shapes follow vLLM's
model files: vllm/model_executor/models/{llama,qwen2,mistral,phi3,gemma,gemma2,mixtral,
qwen2_moe,deepseek_v2,jamba}.py), and how many bytes the loaded weights take for a dtype or a 4-bit
AWQ/GPTQ packing (vllm/model_executor/layers/quantization/{awq,gptq}.py: int32-packed weights,
fp16 scales and packed zero points per group of `group_size` input rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# vllm/model_executor/models/registry.py: the architectures the lab engine knows the shape of.
SUPPORTED = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Phi3ForCausalLM",
        "GemmaForCausalLM",
        "Gemma2ForCausalLM",
        "MixtralForCausalLM",
        "Qwen2MoeForCausalLM",
        "DeepseekV2ForCausalLM",
        "JambaForCausalLM",
    }
)
BIASED_QKV = frozenset({"qwen2", "qwen2_moe"})


class UnsupportedArchitecture(Exception):
    """vllm/model_executor/models/registry.py: _raise_for_unsupported."""


@dataclass(frozen=True)
class Shape:
    """Parameters split by how a 4-bit quantisation stores them: the linear layers it packs
    (as (in, out) pairs) and the rest, kept in the activation dtype."""

    linears: tuple[tuple[int, int, int], ...]  # (in_features, out_features, how many)
    other: int

    @property
    def params(self) -> int:
        return self.other + sum(i * o * n for i, o, n in self.linears)

    def quantized_bytes(self, bits: int, group_size: int) -> int:
        """Packed weights, fp16 scales and packed zeros per group; the rest in fp16."""
        total = self.other * 2
        for fin, fout, n in self.linears:
            groups = -(-fin // group_size)
            total += n * (fin * fout * bits // 8 + groups * fout * 2 + groups * fout * bits // 8)
        return total


def check_supported(config: dict[str, Any]) -> str:
    archs = [str(a) for a in config.get("architectures") or []]
    for a in archs:
        if a in SUPPORTED:
            return a
    raise UnsupportedArchitecture(
        f"Model architectures {archs} are not supported for now. "
        f"Supported architectures: {sorted(SUPPORTED)}"
    )


def _attention(c: dict[str, Any], h: int) -> tuple[list[tuple[int, int, int]], int]:
    """One layer's attention linears and its other parameters (biases, MLA norms)."""
    heads = int(c["num_attention_heads"])
    if "kv_lora_rank" in c:  # MLA (deepseek_v2.py: DeepseekV2MLAAttention)
        rank, rope = int(c["kv_lora_rank"]), int(c["qk_rope_head_dim"])
        nope, v = int(c["qk_nope_head_dim"]), int(c["v_head_dim"])
        q_rank = c.get("q_lora_rank")
        if q_rank:
            q = [(h, int(q_rank), 1), (int(q_rank), heads * (nope + rope), 1)]
            extra = int(q_rank)
        else:
            q, extra = [(h, heads * (nope + rope), 1)], 0
        kv = [(h, rank + rope, 1), (rank, heads * (nope + v), 1)]
        return [*q, *kv, (heads * v, h, 1)], extra + rank
    kv_heads = int(c.get("num_key_value_heads") or heads)
    hd = int(c.get("head_dim") or h // heads)
    lin = [(h, heads * hd, 1), (h, kv_heads * hd, 2), (heads * hd, h, 1)]
    bias = (heads + 2 * kv_heads) * hd if c.get("model_type") in BIASED_QKV else 0
    return lin, bias


def periodic(c: dict[str, Any], layer: int, kind: str) -> bool:
    """Jamba's layer schedule (jamba.py): layer i is of `kind` (attn, expert) when
    i % {kind}_layer_period == {kind}_layer_offset."""
    period = int(c.get(f"{kind}_layer_period") or 1)
    return layer % period == int(c.get(f"{kind}_layer_offset") or 0)


def is_jamba(c: dict[str, Any]) -> bool:
    return "attn_layer_period" in c and "mamba_d_state" in c


def _mamba(c: dict[str, Any], h: int) -> tuple[list[tuple[int, int, int]], int]:
    """One Jamba Mamba mixer (jamba.py: JambaMambaDecoderLayer, mamba_mixer.py): in_proj to x
    and z, x_proj to dt, B and C, dt_proj, out_proj; conv1d, A, D and the dt/B/C norms."""
    inner, state = int(c["mamba_expand"]) * h, int(c["mamba_d_state"])
    rank = int(c.get("mamba_dt_rank") or -(-h // 16))
    lin = [(h, 2 * inner, 1), (inner, rank + 2 * state, 1), (rank, inner, 1), (inner, h, 1)]
    conv = inner * int(c["mamba_d_conv"]) + (inner if c.get("mamba_conv_bias", True) else 0)
    other = conv + inner + inner * state + inner + rank + 2 * state  # + dt bias, A_log, D, norms
    return lin, other


def _mlp(c: dict[str, Any], h: int, layer: int) -> tuple[list[tuple[int, int, int]], int]:
    """One layer's MLP (dense, or experts + router + shared experts)."""
    experts = int(
        c.get("num_local_experts") or c.get("n_routed_experts") or c.get("num_experts") or 0
    )
    dense_first = int(c.get("first_k_dense_replace", 0))
    if is_jamba(c) and not periodic(c, layer, "expert"):
        experts = 0
    if experts <= 1 or layer < dense_first:
        inter = int(c["intermediate_size"])
        return [(h, inter, 2), (inter, h, 1)], 0
    inter = int(c.get("moe_intermediate_size") or c["intermediate_size"])
    lin = [(h, inter, 2 * experts), (inter, h, experts)]
    router = h * experts
    shared = int(c.get("shared_expert_intermediate_size") or 0)
    shared += int(c.get("n_shared_experts") or 0) * inter
    if shared:
        lin += [(h, shared, 2), (shared, h, 1)]
        if "shared_expert_intermediate_size" in c:
            router += h  # qwen2_moe.py: shared_expert_gate
    return lin, router


def shape(config: dict[str, Any]) -> Shape:
    c = config
    check_supported(c)
    h, vocab, layers = int(c["hidden_size"]), int(c["vocab_size"]), int(c["num_hidden_layers"])
    norms_per_layer = 4 if c.get("model_type") == "gemma2" else 2
    tied = bool(c.get("tie_word_embeddings", True))
    other = vocab * h * (1 if tied else 2) + h  # embeddings (+ lm_head) and the final norm
    linears: list[tuple[int, int, int]] = []
    for layer in range(layers):
        jamba_mamba = is_jamba(c) and not periodic(c, layer, "attn")
        att, att_other = _mamba(c, h) if jamba_mamba else _attention(c, h)
        mlp, mlp_other = _mlp(c, h, layer)
        linears += att + mlp
        other += att_other + mlp_other + norms_per_layer * h
    merged: dict[tuple[int, int], int] = {}
    for fin, fout, n in linears:
        merged[(fin, fout)] = merged.get((fin, fout), 0) + n
    return Shape(tuple((i, o, n) for (i, o), n in sorted(merged.items())), other)


def weight_bytes(config: dict[str, Any], dtype_bytes: int) -> int:
    """The loaded weights' bytes: 4-bit packing for AWQ/GPTQ, else every parameter in dtype."""
    s = shape(config)
    quant = config.get("quantization_config") or {}
    if quant.get("quant_method") in ("awq", "gptq"):
        return s.quantized_bytes(int(quant.get("bits", 4)), int(quant.get("group_size", 128)))
    return s.params * dtype_bytes
