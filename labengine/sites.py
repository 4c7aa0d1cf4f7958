"""Where vLLM logs each record the lab engine prints: the `[file.py:N]` of its log lines.

vLLM's formatter prints the basename and line of the logger call (`%(filename)s:%(lineno)d`;
its `*_once` helpers pass a stacklevel so that the caller's line is the one shown). The call
moves between releases, so each wording era has its own table, read from that era's wheel
(vllm 0.19.1, 0.33.0) and checked against it by bench/conformance.py. A path is the module's
path under the `vllm/` package, so that the check can open it; the log shows its basename.

Where a release has two code paths for one message, the table follows the path the lab
engine models: a CUDA device and the model runner that release uses there by default. 0.19 has
only the V1 GPU model runner (`vllm/v1/worker/gpu_model_runner.py`); 0.33 uses Model Runner V2
(`vllm/v1/worker/gpu/model_runner.py`, VllmConfig.use_v2_model_runner) unless
VLLM_USE_V2_MODEL_RUNNER=0 picks the V1 runner: the `*_V2` sites.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from vllmfacts.wording import Era


class Site(enum.StrEnum):
    """The log records the lab engine prints, by what they say."""

    ARGPARSE_MODEL_FLAG = "argparse_model_flag"  # "With `vllm serve`, you should provide..."
    NON_DEFAULT_ARGS = "non_default_args"
    API_SERVER_COUNT = "api_server_count"  # "Defaulting api_server_count to data_parallel_size"
    UNKNOWN_ENV = "unknown_env"  # "Unknown vLLM environment variable detected: ..."
    RESOLVED_ARCHITECTURE = "resolved_architecture"
    UPCASTING = "upcasting"  # _get_and_verify_dtype's three casts
    DOWNCASTING = "downcasting"
    CASTING = "casting"
    LONG_MAX_MODEL_LEN = "long_max_model_len"  # allowed by VLLM_ALLOW_LONG_MAX_MODEL_LEN
    MAX_MODEL_LEN = "max_model_len"  # "Using max model len N"
    CHUNKED_PREFILL = "chunked_prefill"
    HEADLESS_LAUNCH = "headless_launch"
    WORKER_DIED = "worker_died"  # the executor's worker monitor: "Worker proc ... died"
    SUPPORTED_TASKS = "supported_tasks"
    CHAT_CONTENT_FORMAT = "chat_content_format"  # the chat renderer's warm-up: "Detected ..."
    SERVER_START = "server_start"  # "Starting vLLM server on ..."
    ROUTES_HEAD = "routes_head"  # "Available routes are:"
    ROUTE = "route"
    DEV_MODE = "dev_mode"  # the development endpoints' security warning
    ENGINE_CONFIG = "engine_config"  # "Initializing a V1 LLM engine (vX) with config: ..."
    DP_GROUP_LEADER = "dp_group_leader"
    LOAD_START = "load_start"  # "Starting to load model ..." (the V1 model runner)
    LOAD_START_V2 = "load_start_v2"  # Model Runner V2: "Loading model from scratch..."
    DOWNLOAD_TIME = "download_time"
    WEIGHTS_LOADED = "weights_loaded"  # "Loading weights took ..."
    MODEL_LOADED = "model_loaded"  # "Model loading took ... GiB memory and ..."
    MODEL_LOADED_V2 = "model_loaded_v2"
    COMPILE_CACHE_DIR = "compile_cache_dir"
    COMPILE_TOOK = "compile_took"
    KV_MEMORY = "kv_memory"  # "Available KV cache memory: ..."
    CUDAGRAPH_PROFILING_ON = "cudagraph_profiling_on"  # 0.2x+: the estimate applied
    CUDAGRAPH_PROFILING_OFF = "cudagraph_profiling_off"  # 0.2x+: the estimate turned off
    KV_CACHE_SIZE = "kv_cache_size"  # "GPU KV cache size: ..." (0.33: with the concurrency)
    MAX_CONCURRENCY = "max_concurrency"  # 0.19: a line of its own
    GRAPH_CAPTURED = "graph_captured"
    GRAPH_CAPTURED_V2 = "graph_captured_v2"
    INIT_ENGINE_TOOK = "init_engine_took"  # 0.33: "(compilation: ...)" when compiled
    INIT_ENGINE_TOOK_EAGER = "init_engine_took_eager"  # 0.33: no compilation time
    CORE_FAILED_TO_START = "core_failed_to_start"  # run_engine_core's logger.exception
    CORE_FATAL_ERROR = "core_fatal_error"
    UTILITY_FAILED = "utility_failed"  # _invoke_utility_method: "Invocation of %s method failed"
    ENGINE_PROC_DIED = "engine_proc_died"  # 0.19: the client's monitor of the engine core
    OUTPUT_HANDLER_FAILED = "output_handler_failed"
    STATS = "stats"  # the periodic throughput line
    SLEEP_TOOK = "sleep_took"
    ALREADY_SLEEPING = "already_sleeping"
    WAKE_UP = "wake_up"  # the /wake_up route's "wake up the engine with tags: ..."
    NOT_SLEEPING = "not_sleeping"
    WAKE_TOOK = "wake_took"
    # NixlConnector's _log_failure (stacklevel=2: the caller's line) for a failed handshake: once
    # for the remote engine, once per request that waited on it
    NIXL_SETUP_FAILED = "nixl_setup_failed"
    NIXL_HANDSHAKE_FAILED = "nixl_handshake_failed"
    # the API server's _raise_if_error: a request the engine finished with an error
    REQUEST_FAILED = "request_failed"


class Location(NamedTuple):
    """A logger call in the wheel: its module under `vllm/`, and the call's line."""

    path: str
    line: int

    @property
    def tag(self) -> str:
        """What the log shows: `basename:line`."""
        return f"{self.path.rsplit('/', 1)[-1]}:{self.line}"


_L = Location
# Each era's own calls; a site an era lacks (its message is not in that release) is absent.
SITES: dict[Era, dict[Site, Location]] = {
    Era.V0_19: {
        Site.ARGPARSE_MODEL_FLAG: _L("utils/argparse_utils.py", 191),
        Site.NON_DEFAULT_ARGS: _L("entrypoints/utils.py", 233),
        Site.API_SERVER_COUNT: _L("entrypoints/cli/serve.py", 101),
        Site.UNKNOWN_ENV: _L("envs.py", 1744),
        Site.RESOLVED_ARCHITECTURE: _L("config/model.py", 549),
        Site.UPCASTING: _L("config/model.py", 2010),
        Site.DOWNCASTING: _L("config/model.py", 2013),
        Site.CASTING: _L("config/model.py", 2016),
        Site.LONG_MAX_MODEL_LEN: _L("config/model.py", 2176),
        Site.MAX_MODEL_LEN: _L("config/model.py", 1678),
        Site.CHUNKED_PREFILL: _L("config/scheduler.py", 238),
        Site.HEADLESS_LAUNCH: _L("entrypoints/cli/serve.py", 193),
        Site.WORKER_DIED: _L("v1/executor/multiproc_executor.py", 273),
        Site.SUPPORTED_TASKS: _L("entrypoints/openai/api_server.py", 592),
        Site.UTILITY_FAILED: _L("v1/engine/core.py", 1308),
        Site.CHAT_CONTENT_FORMAT: _L("renderers/hf.py", 314),
        Site.SERVER_START: _L("entrypoints/openai/api_server.py", 596),
        Site.ROUTES_HEAD: _L("entrypoints/launcher.py", 37),
        Site.ROUTE: _L("entrypoints/launcher.py", 46),
        Site.DEV_MODE: _L("entrypoints/serve/__init__.py", 14),
        Site.ENGINE_CONFIG: _L("v1/engine/core.py", 105),
        Site.DP_GROUP_LEADER: _L("v1/executor/multiproc_executor.py", 134),
        Site.LOAD_START: _L("v1/worker/gpu_model_runner.py", 4735),
        Site.DOWNLOAD_TIME: _L("model_executor/model_loader/weight_utils.py", 581),
        Site.WEIGHTS_LOADED: _L("model_executor/model_loader/default_loader.py", 384),
        Site.MODEL_LOADED: _L("v1/worker/gpu_model_runner.py", 4820),
        Site.COMPILE_CACHE_DIR: _L("compilation/backends.py", 1051),
        Site.COMPILE_TOOK: _L("compilation/monitor.py", 48),
        Site.KV_MEMORY: _L("v1/worker/gpu_worker.py", 436),
        Site.KV_CACHE_SIZE: _L("v1/core/kv_cache_utils.py", 1319),
        Site.MAX_CONCURRENCY: _L("v1/core/kv_cache_utils.py", 1324),
        Site.GRAPH_CAPTURED: _L("v1/worker/gpu_model_runner.py", 6046),
        Site.INIT_ENGINE_TOOK: _L("v1/engine/core.py", 283),
        Site.CORE_FAILED_TO_START: _L("v1/engine/core.py", 1108),
        Site.CORE_FATAL_ERROR: _L("v1/engine/core.py", 1110),
        Site.ENGINE_PROC_DIED: _L("v1/engine/core_client.py", 667),
        Site.OUTPUT_HANDLER_FAILED: _L("v1/engine/async_llm.py", 707),
        Site.STATS: _L("v1/metrics/loggers.py", 259),
        Site.SLEEP_TOOK: _L("v1/executor/abstract.py", 320),
        Site.ALREADY_SLEEPING: _L("v1/executor/abstract.py", 313),
        Site.WAKE_UP: _L("entrypoints/serve/sleep/api_router.py", 39),
        Site.NOT_SLEEPING: _L("v1/executor/abstract.py", 326),
        Site.WAKE_TOOK: _L("v1/executor/abstract.py", 338),
        Site.NIXL_SETUP_FAILED: _L(
            "distributed/kv_transfer/kv_connector/v1/nixl_connector.py", 1504
        ),
        Site.NIXL_HANDSHAKE_FAILED: _L(
            "distributed/kv_transfer/kv_connector/v1/nixl_connector.py", 1521
        ),
        Site.REQUEST_FAILED: _L("entrypoints/openai/engine/serving.py", 580),
    },
    Era.V0_33: {
        Site.ARGPARSE_MODEL_FLAG: _L("utils/argparse_utils.py", 330),
        Site.NON_DEFAULT_ARGS: _L("entrypoints/common/startup.py", 96),
        Site.API_SERVER_COUNT: _L("entrypoints/cli/serve.py", 127),
        Site.UNKNOWN_ENV: _L("platforms/interface.py", 1469),
        Site.RESOLVED_ARCHITECTURE: _L("config/model.py", 744),
        Site.UPCASTING: _L("config/model.py", 2510),
        Site.DOWNCASTING: _L("config/model.py", 2513),
        Site.CASTING: _L("config/model.py", 2516),
        Site.LONG_MAX_MODEL_LEN: _L("config/model.py", 2678),
        Site.MAX_MODEL_LEN: _L("config/model.py", 2170),
        Site.CHUNKED_PREFILL: _L("config/scheduler.py", 310),
        Site.HEADLESS_LAUNCH: _L("entrypoints/cli/serve.py", 224),
        Site.WORKER_DIED: _L("v1/executor/multiproc_executor.py", 380),
        Site.SUPPORTED_TASKS: _L("entrypoints/launchers/api_server/entry.py", 135),
        Site.UTILITY_FAILED: _L("v1/engine/core.py", 1849),
        Site.CHAT_CONTENT_FORMAT: _L("renderers/hf.py", 736),
        Site.SERVER_START: _L("entrypoints/launchers/api_server/entry.py", 139),
        Site.ROUTES_HEAD: _L("entrypoints/launchers/launcher.py", 188),
        Site.ROUTE: _L("entrypoints/launchers/launcher.py", 197),
        Site.DEV_MODE: _L("entrypoints/serve/__init__.py", 44),
        Site.ENGINE_CONFIG: _L("v1/engine/core.py", 139),
        Site.DP_GROUP_LEADER: _L("v1/executor/multiproc_executor.py", 167),
        Site.LOAD_START: _L("v1/worker/gpu_model_runner.py", 4978),
        Site.DOWNLOAD_TIME: _L("model_executor/model_loader/weight_utils.py", 537),
        Site.WEIGHTS_LOADED: _L("model_executor/model_loader/default_loader.py", 506),
        Site.MODEL_LOADED: _L("v1/worker/gpu_model_runner.py", 5088),
        Site.COMPILE_CACHE_DIR: _L("compilation/backends.py", 1125),
        Site.COMPILE_TOOK: _L("compilation/monitor.py", 62),
        Site.KV_MEMORY: _L("v1/worker/gpu_worker.py", 772),
        Site.CUDAGRAPH_PROFILING_ON: _L("v1/worker/gpu_worker.py", 787),
        Site.CUDAGRAPH_PROFILING_OFF: _L("v1/worker/gpu_worker.py", 804),
        Site.KV_CACHE_SIZE: _L("v1/core/kv_cache_utils.py", 1147),
        Site.GRAPH_CAPTURED: _L("v1/worker/gpu_model_runner.py", 6516),
        Site.LOAD_START_V2: _L("v1/worker/gpu/model_runner.py", 399),
        Site.MODEL_LOADED_V2: _L("v1/worker/gpu/model_runner.py", 428),
        Site.GRAPH_CAPTURED_V2: _L("v1/worker/gpu/model_runner.py", 1163),
        Site.INIT_ENGINE_TOOK: _L("v1/engine/core.py", 405),
        Site.INIT_ENGINE_TOOK_EAGER: _L("v1/engine/core.py", 412),
        Site.CORE_FAILED_TO_START: _L("v1/engine/core.py", 1584),
        Site.CORE_FATAL_ERROR: _L("v1/engine/core.py", 1586),
        Site.OUTPUT_HANDLER_FAILED: _L("v1/engine/async_llm.py", 943),
        Site.STATS: _L("v1/metrics/loggers.py", 335),
        Site.SLEEP_TOOK: _L("v1/executor/abstract.py", 408),
        Site.ALREADY_SLEEPING: _L("v1/executor/abstract.py", 402),
        Site.WAKE_UP: _L("entrypoints/serve/dev/sleep/api_router.py", 50),
        Site.NOT_SLEEPING: _L("v1/executor/abstract.py", 414),
        Site.WAKE_TOOK: _L("v1/executor/abstract.py", 426),
        Site.NIXL_SETUP_FAILED: _L(
            "distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", 1435
        ),
        Site.NIXL_HANDSHAKE_FAILED: _L(
            "distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py", 1471
        ),
        Site.REQUEST_FAILED: _L("entrypoints/generate/base/serving.py", 203),
    },
}


def where(era: Era, site: Site) -> str:
    """The `file.py:N` vLLM of `era` prints for the record; KeyError for a site the era lacks
    (the caller prints a record that release does not have: a defect of the lab engine)."""
    return SITES[era][site].tag
