"""vLLM's environment variables (vllm/envs.py): the known names, the unknown-name warning and the
VLLM_PORT parsing that trips on Kubernetes service links."""

from __future__ import annotations

from collections.abc import Mapping

from labengine.wording import Era, vllm_port_not_int, vllm_port_uri

# A subset of vllm/envs.py's `environment_variables` (the names operators actually set). Any other
# VLLM_* name is "unknown" and warned about, exactly as vLLM does.
KNOWN = frozenset(
    [
        "VLLM_HOST_IP",
        "VLLM_PORT",
        "VLLM_RPC_BASE_PATH",
        "VLLM_USE_MODELSCOPE",
        "VLLM_RINGBUFFER_WARNING_INTERVAL",
        "VLLM_NCCL_SO_PATH",
        "VLLM_CONFIG_ROOT",
        "VLLM_CACHE_ROOT",
        "VLLM_USAGE_STATS_SERVER",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_USAGE_SOURCE",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_LOGGING_LEVEL",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGITS_PROCESSOR_THREADS",
        "VLLM_TRACE_FUNCTION",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_USE_FLASHINFER_SAMPLER",
        "VLLM_PP_LAYER_PARTITION",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_USE_RAY_SPMD_WORKER",
        "VLLM_USE_RAY_COMPILED_DAG",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ASSETS_CACHE",
        "VLLM_IMAGE_FETCH_TIMEOUT",
        "VLLM_VIDEO_FETCH_TIMEOUT",
        "VLLM_AUDIO_FETCH_TIMEOUT",
        "VLLM_TARGET_DEVICE",
        "VLLM_MAIN_CUDA_VERSION",
        "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB",
        "VLLM_RPC_TIMEOUT",
        "VLLM_PLUGINS",
        "VLLM_TORCH_PROFILER_DIR",
        "VLLM_USE_TRITON_AWQ",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_SKIP_P2P_CHECK",
        "VLLM_DISABLED_KERNELS",
        "VLLM_USE_V1",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_LOG_BATCHSIZE_INTERVAL",
        "VLLM_DISABLE_COMPILE_CACHE",
        "VLLM_SERVER_DEV_MODE",
        "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE",
        "VLLM_MLA_DISABLE",
        "VLLM_ENGINE_ITERATION_TIMEOUT_S",
        "VLLM_API_KEY",
        "VLLM_DEBUG_LOG_API_SERVER_RESPONSE",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "VLLM_USE_DEEP_GEMM",
        "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
        "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "VLLM_NCCL_INCLUDE_PATH",
        "VLLM_USE_FLASHINFER_MOE_FP8",
        "VLLM_DP_RANK",
        "VLLM_DP_SIZE",
        "VLLM_DP_MASTER_IP",
        "VLLM_DP_MASTER_PORT",
        "VLLM_RANDOMIZE_DP_DUMMY_INPUTS",
        "VLLM_MARLIN_USE_ATOMIC_ADD",
        "VLLM_USE_CUDNN_PREFILL",
        "VLLM_SLEEP_WHEN_IDLE",
        "VLLM_MQ_MAX_CHUNK_BYTES_MB",
        "VLLM_CUDART_SO_PATH",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
        "VLLM_TPU_BUCKET_PADDING_GAP",
        "VLLM_XLA_CACHE_PATH",
        "VLLM_FUSED_MOE_CHUNK_SIZE",
        "VLLM_ENABLE_FUSED_MOE_ACTIVATION_CHUNKING",
        "VLLM_USE_PRECOMPILED",
        "VLLM_DOCKER_BUILD_CONTEXT",
        "VLLM_KV_CACHE_LAYOUT",
        "VLLM_COMPUTE_NANS_IN_LOGITS",
        "VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS",
        "VLLM_DEEP_GEMM_WARMUP",
        "VLLM_LOOPBACK_IP",
    ]
)


class EnvError(ValueError):
    pass


def unknown_names(env: Mapping[str, str]) -> list[str]:
    return [k for k in env if k.startswith("VLLM_") and k not in KNOWN]


def vllm_port(era: Era, env: Mapping[str, str]) -> int | None:
    """envs.get_vllm_port(): None when unset; ValueError for a URI or a non-integer."""
    raw = env.get("VLLM_PORT")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        if "://" in raw:
            raise EnvError(vllm_port_uri(era, raw)) from exc
        raise EnvError(vllm_port_not_int(raw)) from exc


def truthy(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in ("1", "true", "yes")
