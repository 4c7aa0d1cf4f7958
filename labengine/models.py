"""Model repositories as vLLM reads them: `config.json` and the safetensors index."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGED_MODELS = Path(__file__).resolve().parent / "models"

# vllm/config/model.py: the keys that can bound the context window, in the order vLLM checks them.
POSSIBLE_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "half": 2, "float": 4}


class ModelNotFound(Exception):
    """No repository for the model tag on any search path."""


@dataclass(frozen=True)
class ModelInfo:
    tag: str
    path: Path
    config: dict[str, Any]
    checkpoint_bytes: int
    lab_profile: dict[str, Any]

    @property
    def architecture(self) -> str:
        archs = self.config.get("architectures") or ["UnknownForCausalLM"]
        return str(archs[0])

    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def num_kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads", self.config["num_attention_heads"]))

    @property
    def head_dim(self) -> int:
        hd = self.config.get("head_dim")
        if hd:
            return int(hd)
        return int(self.config["hidden_size"]) // int(self.config["num_attention_heads"])

    @property
    def dtype(self) -> str:
        quant = self.config.get("quantization_config") or {}
        if quant.get("quant_method") in ("awq", "gptq"):
            return "float16"  # vLLM runs AWQ/GPTQ models in fp16
        return str(self.config.get("torch_dtype", "bfloat16"))

    @property
    def quantization(self) -> str | None:
        quant = self.config.get("quantization_config") or {}
        method = quant.get("quant_method")
        return str(method) if method else None

    def derived_max_len(self) -> tuple[str, float]:
        """(key, derived max_model_len) exactly as vLLM derives it from config.json."""
        derived = math.inf
        key = "max_position_embeddings"
        for k in POSSIBLE_MAX_LEN_KEYS:
            v = self.config.get(k)
            if v is not None and v < derived:
                derived, key = float(v), k
        rope = self.config.get("rope_scaling")
        if isinstance(rope, dict) and "factor" in rope:
            rope_type = rope.get("rope_type", rope.get("type"))
            if rope_type not in ("su", "longrope", "llama3"):
                if rope_type == "yarn":
                    derived = float(rope["original_max_position_embeddings"])
                derived *= float(rope["factor"])
        if math.isinf(derived):
            derived = 2048.0  # vLLM's fallback when config.json bounds nothing
        return key, derived

    def kv_bytes_per_token_per_layer(self, tp: int = 1) -> int:
        kv_heads = max(1, self.num_kv_heads // tp)
        return 2 * kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    def loaded_bytes(self, tp: int = 1) -> int:
        """GPU memory the loaded model takes on one rank: the checkpoint plus what the loader adds
        (the lab profile's measured `load_extra_bytes`, e.g. AWQ->Marlin repacking buffers)."""
        extra = int(self.lab_profile.get("load_extra_bytes", 0))
        return math.ceil((self.checkpoint_bytes + extra) / tp)

    def activation_peak_bytes(self, max_num_batched_tokens: int, max_num_seqs: int) -> int:
        """Peak of the profiling forward pass: MLP and residual activations of a full batch of
        tokens, plus fp32 logits of the sampler warm-up for max_num_seqs requests."""
        h = int(self.config["hidden_size"])
        inter = int(self.config["intermediate_size"])
        forward = max_num_batched_tokens * (3 * inter + 4 * h) * DTYPE_BYTES[self.dtype]
        sampler = max_num_seqs * int(self.config["vocab_size"]) * 4
        return forward + sampler


def search_paths() -> list[Path]:
    extra = os.environ.get("GAMEDAY_MODELS_PATH", "")
    return [Path(p) for p in extra.split(":") if p] + [PACKAGED_MODELS]


def resolve(tag: str, download_dir: str | None = None) -> ModelInfo:
    candidates = [Path(tag)]
    if download_dir:
        candidates.append(Path(download_dir) / tag)
    candidates += [base / tag for base in search_paths()]
    for cand in candidates:
        if (cand / "config.json").is_file():
            return _load(tag, cand)
    raise ModelNotFound(
        f"Invalid repository ID or local directory specified: '{tag}'.\n"
        "Please verify the following requirements:\n"
        "1. Provide a valid Hugging Face repository ID.\n"
        "2. Specify a local directory that contains a recognized configuration file.\n"
        "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
        "   - For Mistral models: ensure the presence of a 'params.json'.\n"
    )


def _load(tag: str, path: Path) -> ModelInfo:
    config = json.loads((path / "config.json").read_text())
    index = path / "model.safetensors.index.json"
    if index.is_file():
        total = int(json.loads(index.read_text())["metadata"]["total_size"])
    else:
        total = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    profile_file = path / "gameday-lab.json"
    profile = json.loads(profile_file.read_text()) if profile_file.is_file() else {}
    return ModelInfo(tag=tag, path=path, config=config, checkpoint_bytes=total, lab_profile=profile)
