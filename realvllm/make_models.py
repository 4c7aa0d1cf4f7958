"""The tiny models the real-vLLM lab serves, made from code at set-up (never downloaded).

    <real-vLLM env>/bin/python realvllm/make_models.py <hf-home>

Runs in the real-vLLM environment (it needs torch, safetensors and tokenizers, which the
project's own .venv does not carry). Each model is written into the Hugging Face cache layout
under `<hf-home>/hub` (`models--<org>--<name>/snapshots/<revision>/` and `refs/main`), so that
`vllm serve gameday-lab/<name>` finds it offline, by a repo id, as a deployment names its model.

Each model's config.json is the project's own (vllmfacts/models/gameday-lab/<name>/), copied as
it is. tiny-qwen2.5-14b-shape keeps the *attention geometry* of the model the seeds deploy
(Qwen2.5-14B-Instruct: 48 layers, 40 query heads, 8 KV heads of 128, a 32,768-token window,
2-byte KV entries: 192 KiB of KV per token) with a residual width of 80, so every figure vLLM
derives from that geometry (the context window, what N tokens of KV need) is the real model's,
while the weights are 92 MiB. tiny-qwen2.5-14b-shape-base is its base twin: the same config
and weights, with the tokenizer_config.json kept beside its config.json, which defines no chat
template (as a base model's, Llama-2-7b-hf's for one, defines none). The weights are set, not
trained: attention and MLP write nothing into the residual stream, so the logits depend only on
the current token, and the embedding and LM head form a chain that answers every prompt with one
short sentence and then the end token (a random model never stops, and the baseline probe
refuses an answer cut at max_tokens).

Everything is deterministic: the same code writes the same bytes (the revision is their hash).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ORG = "gameday-lab"
ANSWER = "This tiny test model is ready to serve."
VOCAB = 1024
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS = "<|im_end|>"
# Qwen2.5's own chat template, cut to what a probe sends (no tools)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# text the byte-level BPE is trained on: short English, enough for a 1,024-token vocabulary
CORPUS = (
    (ANSWER + " ") * 4,
    "Introduce yourself in one sentence.",
    "rollback check. Answer only OK.",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "A system that serves language models must start, answer and recover when it fails. "
    "Operators read logs, restart processes, change flags and roll back configurations. "
    "Memory, context windows, tensor parallel groups and network addresses all matter.",
)


# the models' config.json files, shared with the lab engine and the tests that derive what a
# scenario asserts from them (vllmfacts/models)
PACKAGED = Path(__file__).resolve().parent.parent / "vllmfacts" / "models" / ORG
MODELS = ("tiny-qwen2.5-14b-shape", "tiny-qwen2.5-14b-shape-base")


@dataclass(frozen=True)
class Shape:
    """What the weights need of a model's config."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int

    @classmethod
    def of(cls, name: str, config: dict[str, Any]) -> Shape:
        return cls(
            name=name,
            layers=int(config["num_hidden_layers"]),
            heads=int(config["num_attention_heads"]),
            kv_heads=int(config["num_key_value_heads"]),
            head_dim=int(config["head_dim"]),
            hidden=int(config["hidden_size"]),
        )


def tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def chain(tok: Tokenizer) -> list[int]:
    """The answer's token ids; each must be distinct, since a token has one successor."""
    ids = list(tok.encode(ANSWER).ids)
    if len(set(ids)) != len(ids):
        raise SystemExit(f"make_models: the answer {ANSWER!r} repeats a token: {ids}")
    return ids


def weights(shape: Shape, answer: list[int], eos: int) -> dict[str, torch.Tensor]:
    """Attention and MLP output zero; embedding row of answer token i is the basis vector i+1
    (every other token: basis 0); the LM head maps basis i to answer token i+1, and the last
    to the end token. The residual stream is the embedding, so greedy decoding walks the chain
    from any prompt."""
    if len(answer) + 1 > shape.hidden:
        raise SystemExit(f"make_models: {shape.name}: the answer needs a wider residual")
    vocab = VOCAB
    dt = torch.bfloat16
    embed = torch.zeros(vocab, shape.hidden)
    embed[:, 0] = 1.0
    for i, t in enumerate(answer):
        embed[t, 0] = 0.0
        embed[t, i + 1] = 1.0
    head = torch.zeros(vocab, shape.hidden)
    for i, t in enumerate(answer):
        head[t, i] = 10.0
    head[eos, len(answer)] = 10.0
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    g = torch.Generator().manual_seed(0)

    def small(*size: int) -> torch.Tensor:
        return (torch.randn(*size, generator=g) * 0.02).to(dt)

    out: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": embed.to(dt),
        "model.norm.weight": torch.ones(shape.hidden, dtype=dt),
        "lm_head.weight": head.to(dt),
    }
    for layer in range(shape.layers):
        p = f"model.layers.{layer}."
        out |= {
            p + "input_layernorm.weight": torch.ones(shape.hidden, dtype=dt),
            p + "post_attention_layernorm.weight": torch.ones(shape.hidden, dtype=dt),
            p + "self_attn.q_proj.weight": small(q, shape.hidden),
            p + "self_attn.k_proj.weight": small(kv, shape.hidden),
            p + "self_attn.v_proj.weight": small(kv, shape.hidden),
            p + "self_attn.o_proj.weight": torch.zeros(shape.hidden, q, dtype=dt),
            p + "mlp.gate_proj.weight": small(shape.hidden, shape.hidden),
            p + "mlp.up_proj.weight": small(shape.hidden, shape.hidden),
            p + "mlp.down_proj.weight": torch.zeros(shape.hidden, shape.hidden, dtype=dt),
        }
    return out


def write_model(hub: Path, name: str, tok: Tokenizer) -> Path:
    config_text = (PACKAGED / name / "config.json").read_text(encoding="utf-8")
    config = json.loads(config_text)
    shape = Shape.of(name, config)
    answer, eos = chain(tok), tok.token_to_id(EOS)
    for key, token in (("eos_token_id", EOS), ("bos_token_id", SPECIALS[0])):
        if config[key] != tok.token_to_id(token):
            raise SystemExit(f"make_models: {name}: config.json's {key} is not {token}'s id")
    if config["vocab_size"] != VOCAB:
        raise SystemExit(f"make_models: {name}: config.json's vocab_size is not {VOCAB}")
    staging = hub / f".staging-{shape.name}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file(weights(shape, answer, eos), str(staging / "model.safetensors"))
    (staging / "config.json").write_text(config_text, encoding="utf-8")
    (staging / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "do_sample": False}, indent=2) + "\n"
    )
    tok.save(str(staging / "tokenizer.json"))
    packaged_tokenizer = PACKAGED / name / "tokenizer_config.json"
    if packaged_tokenizer.is_file():
        # a base model's, kept beside its config.json: without a chat template
        shutil.copyfile(packaged_tokenizer, staging / "tokenizer_config.json")
    else:
        (staging / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "bos_token": "<|endoftext|>",
                    "eos_token": EOS,
                    "pad_token": "<|endoftext|>",
                    "model_max_length": config["max_position_embeddings"],
                    "chat_template": CHAT_TEMPLATE,
                },
                indent=2,
            )
            + "\n"
        )
    digest = hashlib.sha1()
    for f in sorted(staging.iterdir()):
        digest.update(f.name.encode() + f.read_bytes())
    revision = digest.hexdigest()
    repo = hub / f"models--{ORG}--{shape.name}"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "snapshots").mkdir(parents=True)
    (repo / "refs").mkdir()
    staging.rename(repo / "snapshots" / revision)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    hub = Path(argv[0]) / "hub"
    tok = tokenizer()
    for name in MODELS:
        where = write_model(hub, name, tok)
        size = sum(f.stat().st_size for f in where.iterdir())
        print(f"{ORG}/{name}: {size / 2**20:.1f} MiB in {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
