"""The call paths of the Python tracebacks vLLM prints, kept as data in `data/tracebacks.json`.

Each traceback is the list of frames real vLLM shows for one failure (file, line, function, the
source line and, where Python 3.12 prints one, the caret line under it), ending where it
raises; the engine prints it with `VllmLog.traceback` after the failure's own last line
(`Type: message`), which the code composes. The file holds one set per
wording era, each read from that era's wheel (bench/conformance.py checks every frame against
it): vLLM's functions move between releases, and a traceback that names 0.19's files under a
0.33 log would send its reader to code that is not there. An era lacks a traceback its release
cannot print. The engine image carries only the engine's own dependencies, so the file is read
with the standard library alone.
"""

from __future__ import annotations

import enum
import json
from functools import cache
from importlib.resources import files

from labengine.logs import Frame
from vllmfacts.wording import Era


class Traceback(enum.StrEnum):
    """The tracebacks in the data file, by where vLLM raises."""

    SERVE_ENVIRON = "serve_environ"  # the unknown-variable check (--fail-on-environ-validation)
    SERVE_BIND = "serve_bind"  # binding the API socket
    SERVE_HEADLESS_API_SERVERS = "serve_headless_api_servers"  # --api-server-count with --headless
    SERVE_CONFIG = "serve_config"  # building the engine config: ModelConfig (and the rest)
    SERVE_CONFIG_PARALLEL = "serve_config_parallel"  # ... ParallelConfig (world size)
    SERVE_CONFIG_VLLM = "serve_config_vllm"  # ... VllmConfig (heads and TP)
    # the same with data parallelism: `vllm serve` runs run_multi_api_server, which builds the
    # engine config itself
    SERVE_MULTI_CONFIG = "serve_multi_config"
    SERVE_MULTI_CONFIG_PARALLEL = "serve_multi_config_parallel"
    SERVE_MULTI_CONFIG_VLLM = "serve_multi_config_vllm"
    # ... and on a headless node (run_headless builds it)
    SERVE_HEADLESS_CONFIG = "serve_headless_config"
    SERVE_HEADLESS_CONFIG_PARALLEL = "serve_headless_config_parallel"
    SERVE_HEADLESS_CONFIG_VLLM = "serve_headless_config_vllm"
    SERVE_TERMINATED = "serve_terminated"  # SIGTERM while the API server initialises
    SERVE_ENGINE_STARTUP = "serve_engine_startup"  # the engine core failed to start
    # init_app_state loading the --lora-modules adapters through the engine core (0.19: the
    # utility call's exception itself; 0.33: init_static_loras's ValueError)
    SERVE_STATIC_LORAS = "serve_static_loras"
    ENGINE_DEAD = "engine_dead"  # the API server's output handler, after the engine core died
    CORE_INIT = "core_init"  # EngineCore's constructor (out of memory loading the weights)
    CORE_CUDA_GRAPHS = "core_cuda_graphs"  # capture_model out of memory, after the KV cache
    CORE_FREE_MEMORY = "core_free_memory"  # the worker's init_device: free memory on the device
    CORE_SET_DEVICE = "core_set_device"  # init_device's first CUDA call, on a broken device
    CORE_VLLM_PORT = "core_vllm_port"  # 0.19: the executor's get_open_port() reading VLLM_PORT
    CORE_ENVS_CACHE = "core_envs_cache"  # 0.33: enable_envs_cache() at the end of EngineCore init
    # the add_lora utility call in the engine core: the worker's PEFTHelper.validate_legal
    CORE_ADD_LORA = "core_add_lora"
    CORE_KV_CACHE = "core_kv_cache"  # check_enough_kv_cache_memory: too little for one request
    CORE_NO_KV_MEMORY = "core_no_kv_memory"  # the same check: nothing left at all
    BUSY_LOOP_NCCL = "busy_loop_nccl"  # an all-reduce with a worker gone
    # the executor waiting for its workers' output past VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
    BUSY_LOOP_RPC_TIMEOUT = "busy_loop_rpc_timeout"
    BUSY_LOOP_DEEPGEMM = "busy_loop_deepgemm"  # loading a DeepGEMM kernel (CUDA error 800)
    BUSY_LOOP_TRITON = "busy_loop_triton"  # loading a Triton kernel (CUDA error 800)
    # the model runner's device-to-host sync of the sampled tokens, on a device an XID broke
    BUSY_LOOP_CUDA_SYNC = "busy_loop_cuda_sync"
    # not a traceback of its own: the engine core process's frames above the first traceback
    # once run_engine_core re-raises (multiprocessing's bootstrap, then its `raise e`)
    PROCESS_BOOTSTRAP = "process_bootstrap"


class TracebackDataError(Exception):
    """The data file does not hold a well-formed traceback for every `Traceback`."""


def _frame(which: str, raw: object) -> Frame:
    keys = {"file", "line", "function", "code"}
    if not isinstance(raw, dict) or not keys <= set(raw) <= keys | {"carets"}:
        raise TracebackDataError(
            f"{which}: a frame is not {{file, line, function, code[, carets]}}: {raw}"
        )
    file, line, function, code = raw["file"], raw["line"], raw["function"], raw["code"]
    carets = raw.get("carets", "")
    texts = (file, function, code, carets)
    if not (isinstance(line, int) and all(isinstance(v, str) for v in texts)):
        raise TracebackDataError(f"{which}: a frame has a value of the wrong type: {raw}")
    if carets and (not code or set(carets) - {" ", "^", "~"}):
        raise TracebackDataError(f"{which}: carets must be spaces, ^ and ~ under a code line")
    return Frame(file, line, function, code, carets)


@cache
def _load() -> dict[Era, dict[Traceback, tuple[Frame, ...]]]:
    raw = json.loads(files("labengine").joinpath("data", "tracebacks.json").read_text("utf-8"))
    if not isinstance(raw, dict) or set(raw) != {e.value for e in Era}:
        raise TracebackDataError("data/tracebacks.json must name exactly the eras")
    known = {t.value for t in Traceback}
    out: dict[Era, dict[Traceback, tuple[Frame, ...]]] = {}
    for era, tracebacks in raw.items():
        if not isinstance(tracebacks, dict) or not set(tracebacks) <= known:
            raise TracebackDataError(f"data/tracebacks.json: {era}: names beyond Traceback's")
        if not all(isinstance(v, list) for v in tracebacks.values()):
            raise TracebackDataError(f"data/tracebacks.json: {era}: a traceback is not a list")
        out[Era(era)] = {
            Traceback(k): tuple(_frame(f"{era} {k}", f) for f in v) for k, v in tracebacks.items()
        }
    if set().union(*out.values()) != set(Traceback):
        raise TracebackDataError("data/tracebacks.json: a Traceback member is in no era")
    return out


def era_tracebacks(era: Era) -> dict[Traceback, list[Frame]]:
    """Every traceback one era has, by member."""
    return {k: list(v) for k, v in _load()[era].items()}


def frames(era: Era, which: Traceback) -> list[Frame]:
    """The frames of one traceback as `era` prints it, outermost first."""
    try:
        return list(_load()[era][which])
    except KeyError:
        raise TracebackDataError(f"vLLM {era.version} has no traceback {which.value}") from None


def process_died(era: Era, inner: list[Frame]) -> list[Frame]:
    """The engine core process's own traceback once run_engine_core re-raises: multiprocessing's
    bootstrap, the `raise e`, then the frames of the first traceback."""
    return [*frames(era, Traceback.PROCESS_BOOTSTRAP), *inner]
