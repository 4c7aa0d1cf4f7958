"""Model repositories as vLLM reads them: `config.json` and the safetensors index."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllmfacts import arch, memory

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
# vllm/config/model.py: _STR_DTYPE_TO_TORCH_DTYPE (the names `--dtype` takes besides "auto")
DTYPE_NAMES = {
    "half": "float16",
    "float16": "float16",
    "float": "float32",
    "float32": "float32",
    "bfloat16": "bfloat16",
}
# vllm/config/model.py: _FLOAT16_NOT_SUPPORTED_MODELS
FLOAT16_NOT_SUPPORTED = {
    m: "Numerical instability. Please use bfloat16 or float32 instead."
    for m in ("gemma2", "gemma3", "gemma3_text", "glm4")
}
# vllm/utils/torch_utils.py: STR_DTYPE_TO_TORCH_DTYPE for --kv-cache-dtype (fp8 = one byte)
KV_CACHE_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2}


def cast_line(config_dtype: str, dtype: str) -> tuple[str, str] | None:
    """(level, line) vLLM logs when the served dtype differs from the config's
    (vllm/config/model.py: _get_and_verify_dtype), or None."""
    config_dtype = DTYPE_NAMES.get(config_dtype, config_dtype)
    if dtype == config_dtype:
        return None
    if dtype == "float32":
        return "info", f"Upcasting torch.{config_dtype} to torch.{dtype}."
    if config_dtype == "float32":
        return "info", f"Downcasting torch.{config_dtype} to torch.{dtype}."
    return "warning", f"Casting torch.{config_dtype} to torch.{dtype}."


class DtypeError(Exception):
    """vLLM's refusal of a dtype for a model (a ModelConfig validation error)."""


def resolve_dtype(model_type: str, config_dtype: str, requested: str) -> str:
    """vllm/config/model.py: _get_and_verify_dtype with _resolve_auto_dtype on a CUDA device of
    compute capability >= 8 (supported dtypes bfloat16, float16, float32, in that order):
    "auto" keeps the config's dtype but down-casts float32 to bfloat16."""
    config_dtype = DTYPE_NAMES.get(config_dtype, config_dtype)
    req = requested.lower()
    if req == "auto":
        dtype = "bfloat16" if config_dtype == "float32" else config_dtype
        if model_type in FLOAT16_NOT_SUPPORTED and dtype == "float16":
            dtype = "bfloat16"
    elif req in DTYPE_NAMES:
        dtype = DTYPE_NAMES[req]
    else:
        raise DtypeError(f"Unknown dtype: {requested!r}")
    if model_type in FLOAT16_NOT_SUPPORTED and dtype == "float16":
        raise DtypeError(
            f"The model type {model_type!r} does not support float16. "
            f"Reason: {FLOAT16_NOT_SUPPORTED[model_type]}"
        )
    return dtype


class ModelNotFound(Exception):
    """No repository for the model tag on any search path."""


@dataclass(frozen=True)
class ModelInfo:
    tag: str
    path: Path
    config: dict[str, Any]
    checkpoint_bytes: int
    lab_profile: dict[str, Any]
    tokenizer_config: dict[str, Any] | None = None  # tokenizer_config.json, where it is kept

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer defines a chat template (tokenizer_config.json's
        `chat_template`, which vLLM's renderer falls back to without --chat-template). The zoo
        keeps a model's tokenizer_config.json only where it matters: a base model's, which has
        none; a model without one is served with its own template, as the zoo's instruct models
        are."""
        if self.tokenizer_config is None:
            return True
        return bool(self.tokenizer_config.get("chat_template"))

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
    def config_dtype(self) -> str:
        """The checkpoint's dtype as config.json names it (`torch_dtype`, or `dtype` in newer
        transformers); AWQ/GPTQ models run their activations in fp16."""
        quant = self.config.get("quantization_config") or {}
        if quant.get("quant_method") in ("awq", "gptq"):
            return "float16"
        raw = self.config.get("torch_dtype") or self.config.get("dtype") or "bfloat16"
        return DTYPE_NAMES.get(str(raw), str(raw))

    @property
    def dtype(self) -> str:
        """The dtype `--dtype auto` resolves to."""
        return resolve_dtype(self.model_type, self.config_dtype, "auto")

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @property
    def is_mla(self) -> bool:
        """DeepSeek-V2/V3's multi-head latent attention: one latent vector per token and layer."""
        return "kv_lora_rank" in self.config

    def sliding_layers(self) -> int:
        """How many layers attend over a sliding window (vLLM reads config.layer_types, which
        transformers' Gemma2Config fills with sliding layers at even indices)."""
        window = self.config.get("sliding_window")
        if not window:
            return 0
        types = self.config.get("layer_types")
        if isinstance(types, list):
            return sum(1 for t in types if t == "sliding_attention")
        if self.model_type == "gemma2":
            return (self.num_layers + 1) // 2
        return 0

    @property
    def sliding_window(self) -> int:
        return int(self.config.get("sliding_window") or 0) if self.sliding_layers() else 0

    def params(self) -> int:
        return arch.shape(self.config).params

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

    def kv_bytes_per_token_per_layer(
        self, tp: int = 1, dtype: str | None = None, kv_cache_dtype: str = "auto"
    ) -> int:
        """vllm/v1/kv_cache_interface.py: AttentionSpec.page_size_bytes / block_size, K and V
        for this rank's heads; MLAAttentionSpec: one latent (kv_lora_rank + qk_rope_head_dim),
        the same on every rank. `--kv-cache-dtype fp8` stores one byte per element."""
        elem = KV_CACHE_DTYPE_BYTES.get(kv_cache_dtype) or DTYPE_BYTES[dtype or self.dtype]
        if self.is_mla:
            latent = int(self.config["kv_lora_rank"]) + int(self.config["qk_rope_head_dim"])
            return latent * elem
        kv_heads = max(1, self.num_kv_heads // tp)
        return 2 * kv_heads * self.head_dim * elem

    def weight_bytes(self, dtype: str | None = None) -> int:
        """The whole model's weights in `dtype`: the checkpoint's size where it has files in that
        dtype, else counted from the architecture (vllmfacts.arch)."""
        dtype = dtype or self.dtype
        same = DTYPE_BYTES[dtype] == DTYPE_BYTES[self.config_dtype] or self.quantization
        if self.checkpoint_bytes and same:
            return self.checkpoint_bytes
        return arch.weight_bytes(self.config, DTYPE_BYTES[dtype])

    def loaded_bytes(self, tp: int = 1, dtype: str | None = None) -> int:
        """GPU memory the loaded model takes on one rank: the weights plus what the loader adds
        (the lab profile's measured `load_extra_bytes`, e.g. AWQ->Marlin repacking buffers)."""
        extra = int(self.lab_profile.get("load_extra_bytes", 0))
        return math.ceil((self.weight_bytes(dtype) + extra) / tp)

    def activation_peak_bytes(
        self, max_num_batched_tokens: int, max_num_seqs: int, dtype: str | None = None, tp: int = 1
    ) -> int:
        """Peak of the profiling run on one rank (vllmfacts.memory.activation_peak_bytes)."""
        return memory.activation_peak_bytes(
            tokens=max_num_batched_tokens,
            seqs=max_num_seqs,
            hidden=int(self.config["hidden_size"]),
            intermediate=int(
                self.config.get("moe_intermediate_size") or self.config["intermediate_size"]
            ),
            vocab=int(self.config["vocab_size"]),
            dtype_bytes=DTYPE_BYTES[dtype or self.dtype],
            tp=tp,
        )


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
    tok_file = path / "tokenizer_config.json"
    tokenizer = json.loads(tok_file.read_text()) if tok_file.is_file() else None
    return ModelInfo(
        tag=tag,
        path=path,
        config=config,
        checkpoint_bytes=total,
        lab_profile=profile,
        tokenizer_config=tokenizer,
    )
