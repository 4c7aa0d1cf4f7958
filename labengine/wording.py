"""vLLM's message wording for the two eras the project knows (see shared/VLLM_FACTS.md)."""

from __future__ import annotations

import enum


class Era(enum.StrEnum):
    V0_19 = "0.19"
    V0_33 = "0.33"

    @property
    def version(self) -> str:
        return "0.19.1" if self is Era.V0_19 else "0.33.0"

    @property
    def env_docs_url(self) -> str:
        if self is Era.V0_19:
            return "https://docs.vllm.ai/en/stable/serving/env_vars.html"
        return "https://docs.vllm.ai/en/latest/configuration/env_vars.html"

    @property
    def engine_core_name(self) -> str:
        return "EngineCore" if self is Era.V0_19 else "EngineCore_DP0"


def gib(nbytes: float) -> float:
    """vLLM rounds GiB figures with round(x, 2): 3.0, 0.18, 9.1."""
    return round(nbytes / 2**30, 2)


def kv_shortage(era: Era, max_len: int, needed: int, available: int, estimate: int) -> str:
    if era is Era.V0_19:
        return (
            f"To serve at least one request with the models's max seq len ({max_len}), "
            f"({gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({gib(available)} GiB). Based on the available memory, the estimated maximum "
            f"model length is {estimate}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
    return (
        f"To serve at least one request with the model's max seq len ({max_len}), "
        f"({gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({gib(available)} GiB). Based on the available memory, the estimated maximum "
        f"model length is {estimate}. Try increasing `gpu_memory_utilization` (which also "
        "controls CPU memory on the CPU backend) or decreasing `max_model_len` when "
        "initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory.html for more details."
    )


def no_kv_memory() -> str:
    return (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine."
    )


def long_max_model_len(requested: int, key: str, derived: float) -> str:
    return (
        f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
        f"({key}={derived} or model_max_length=None in model's config.json). To allow overriding "
        "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
        "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. "
        "If the model uses absolute position encoding, positions exceeding derived_max_model_len "
        "will cause a CUDA array out-of-bounds error."
    )


def long_max_model_len_allowed(requested: int, key: str, derived: float) -> str:
    return (
        f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
        f"({key}={derived} or model_max_length=None in model's config.json). "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set: make sure the value is correct and within the "
        "model context size."
    )


def world_size_too_large(world: int, gpus: int) -> str:
    return (
        f"World size ({world}) is larger than the number of available GPUs ({gpus}) in this node. "
        "If this is intentional and you are using:\n"
        "- ray, set '--distributed-executor-backend ray'.\n"
        "- multiprocessing, set '--nnodes' appropriately."
    )


def vllm_port_uri(era: Era, value: str) -> str:
    return (
        f"VLLM_PORT '{value}' appears to be a URI. This may be caused by a Kubernetes service "
        f"discovery issue,check the warning in: {era.env_docs_url}"
    )


def vllm_port_not_int(value: str) -> str:
    return f"VLLM_PORT '{value}' must be a valid integer"


def capacity_lines(era: Era, tokens: int, max_len: int, concurrency: float) -> list[str]:
    size = f"GPU KV cache size: {tokens:,} tokens"
    conc = f"Maximum concurrency for {max_len:,} tokens per request: {concurrency:.2f}x"
    if era is Era.V0_19:
        return [size, conc]
    return [f"{size}, {conc}"]
