"""The model zoo (vllmfacts/models): each public model's size from its config.json alone, against
the size its publisher states (the Hugging Face model card's parameter count)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllmfacts import arch
from vllmfacts.models import PACKAGED_MODELS, resolve

# tag -> (published parameters, family)
PUBLISHED = {
    "meta-llama/Llama-3.1-8B-Instruct": (8.03e9, "dense GQA"),
    "meta-llama/Llama-3.1-70B-Instruct": (70.6e9, "dense GQA, 70B class"),
    "Qwen/Qwen2.5-0.5B-Instruct": (0.494e9, "dense GQA, tied embeddings"),
    "Qwen/Qwen2.5-7B-Instruct": (7.62e9, "dense GQA, qkv bias"),
    "mistralai/Mistral-7B-Instruct-v0.3": (7.25e9, "dense GQA"),
    "microsoft/Phi-3-mini-4k-instruct": (3.82e9, "MHA"),
    "google/gemma-7b": (8.54e9, "explicit head_dim"),
    "google/gemma-2-9b": (9.24e9, "hybrid sliding window, float32 config"),
    "google/gemma-2-2b-it": (2.61e9, "hybrid sliding window"),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": (46.7e9, "MoE"),
    "Qwen/Qwen1.5-MoE-A2.7B": (14.3e9, "MoE with shared experts"),
    "deepseek-ai/DeepSeek-V2-Lite": (15.7e9, "MLA + MoE"),
    "Qwen/Qwen2.5-14B-Instruct-AWQ": (14.7e9, "AWQ 4-bit"),
    "TheBloke/Llama-2-7B-Chat-GPTQ": (6.74e9, "GPTQ 4-bit"),
    "meta-llama/Llama-2-7b-hf": (6.74e9, "MHA, a base model without a chat template"),
    "ai21labs/Jamba-v0.1": (51.57e9, "hybrid Mamba-attention MoE"),
}
# made for the lab (the Jamba write-up's scenario: a Jamba-style hybrid that fits one A10G; the
# real-vLLM lab's tiny model with the seed model's attention geometry, and its base twin without a
# chat template), no publisher
LAB_MADE = {
    "gameday-lab/jamba-hybrid-1b",
    "gameday-lab/tiny-qwen2.5-14b-shape",
    "gameday-lab/tiny-qwen2.5-14b-shape-base",
}


def test_the_zoo_holds_every_packaged_model() -> None:
    found = {
        str(p.parent.relative_to(PACKAGED_MODELS)) for p in PACKAGED_MODELS.glob("*/*/config.json")
    }
    assert found == set(PUBLISHED) | LAB_MADE
    assert len(found) >= 12


@pytest.mark.parametrize("tag", sorted(PUBLISHED))
def test_parameter_count_within_2_percent_of_published(tag: str) -> None:
    published, _family = PUBLISHED[tag]
    assert abs(resolve(tag).params() / published - 1) < 0.02


@pytest.mark.parametrize(
    ("tag", "params"),
    [
        # counted by hand from each config: embeddings, per-layer attention, MLP and norms
        ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
        # its model.safetensors.index.json states total_size 141,107,412,992 bytes of bf16
        ("meta-llama/Llama-3.1-70B-Instruct", 70_553_706_496),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 46_702_792_704),
        ("deepseek-ai/DeepSeek-V2-Lite", 15_706_484_224),
        ("ai21labs/Jamba-v0.1", 51_570_323_328),
    ],
)
def test_exact_counts(tag: str, params: int) -> None:
    assert resolve(tag).params() == params


def test_mixtral_count_by_hand() -> None:
    h, inter, layers, vocab, experts = 4096, 14336, 32, 32000, 8
    attention = h * 4096 + 2 * h * 1024 + 4096 * h
    moe = experts * 3 * h * inter + h * experts
    expected = 2 * vocab * h + h + layers * (attention + moe + 2 * h)
    assert expected == 46_702_792_704


def test_jamba_count_by_hand() -> None:
    h, inter, vocab, experts, inner, state, rank = 4096, 14336, 65536, 16, 8192, 16, 256
    attention = h * 4096 + 2 * h * 1024 + 4096 * h
    # in_proj, x_proj, dt_proj (+ bias), out_proj, conv1d (+ bias), A_log, D, dt/B/C norms
    mamba = (
        h * 2 * inner
        + inner * (rank + 2 * state)
        + rank * inner
        + inner
        + inner * h
        + inner * 4
        + inner
        + inner * state
        + inner
        + rank
        + 2 * state
    )
    dense, moe = 3 * h * inter, experts * 3 * h * inter + h * experts
    # attention at i % 8 == 4 (4 layers, all even: dense MLP); experts at odd layers
    layers = 4 * (attention + dense) + 12 * (mamba + dense) + 16 * (mamba + moe) + 32 * 2 * h
    assert 2 * vocab * h + h + layers == 51_570_323_328


def test_config_only_folder_loads_its_computed_weights() -> None:
    m = resolve("Qwen/Qwen2.5-7B-Instruct")
    assert m.checkpoint_bytes == 0  # no safetensors in the folder
    assert m.loaded_bytes() == 7_615_616_512 * 2
    assert m.loaded_bytes(tp=2) == 7_615_616_512


def test_checkpoints_agree_with_the_architecture() -> None:
    for tag in ("Qwen/Qwen2.5-14B-Instruct-AWQ", "meta-llama/Llama-3.1-8B-Instruct"):
        m = resolve(tag)
        assert arch.weight_bytes(m.config, 2) == m.checkpoint_bytes


def test_gptq_packs_four_bits() -> None:
    # TheBloke's model.safetensors is 3.90 GB: int32-packed 4-bit weights, fp16 scales and
    # packed zeros per 128 rows, embeddings and lm_head in fp16
    m = resolve("TheBloke/Llama-2-7B-Chat-GPTQ")
    assert abs(m.weight_bytes() / 3.90e9 - 1) < 0.02


def test_unknown_architecture_is_refused_in_vllms_words(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["FooForCausalLM"]}))
    with pytest.raises(arch.UnsupportedArchitecture) as exc:
        arch.check_supported(resolve(str(tmp_path)).config)
    assert str(exc.value).startswith(
        "Model architectures ['FooForCausalLM'] are not supported for now. "
        "Supported architectures: ["
    )


@pytest.mark.parametrize(
    ("tag", "has_template"),
    [
        ("meta-llama/Llama-2-7b-hf", False),  # a base model: tokenizer_config.json has none
        ("gameday-lab/tiny-qwen2.5-14b-shape-base", False),
        ("Qwen/Qwen2.5-14B-Instruct-AWQ", True),  # no tokenizer_config.json kept: its own
    ],
)
def test_a_chat_template_from_the_tokenizer_config(tag: str, has_template: bool) -> None:
    assert resolve(tag).has_chat_template is has_template


def test_a_tokenizer_config_with_a_template_has_one(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        (PACKAGED_MODELS / "gameday-lab/tiny-qwen2.5-14b-shape/config.json").read_text()
    )
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    assert resolve(str(tmp_path)).has_chat_template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": None}))
    assert not resolve(str(tmp_path)).has_chat_template
