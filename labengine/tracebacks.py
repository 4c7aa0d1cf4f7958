"""The call paths of the Python tracebacks vLLM prints, kept as data in `data/tracebacks.json`.

Each traceback is the list of frames real vLLM shows for one failure (file, line, function, the
source line), ending where it raises; the engine prints it with `VllmLog.traceback` after the
failure's own last line (`Type: message`), which the code composes. The engine image carries only
the engine's own dependencies, so the file is read with the standard library alone.
"""

from __future__ import annotations

import enum
import json
from functools import cache
from importlib.resources import files
from typing import NamedTuple

from labengine.logs import Frame
from labengine.wording import Era


class Traceback(enum.StrEnum):
    """The tracebacks in the data file, by where vLLM raises."""

    SERVE_ENVIRON = "serve_environ"  # the unknown-variable check (--fail-on-environ-validation)
    SERVE_BIND = "serve_bind"  # binding the API socket
    SERVE_CONFIG = "serve_config"  # building the engine config (model, parallel, GPUs)
    SERVE_TERMINATED = "serve_terminated"  # SIGTERM while the API server initialises
    SERVE_ENGINE_STARTUP = "serve_engine_startup"  # the engine core failed to start
    ENGINE_DEAD = "engine_dead"  # the API server's output handler, after the engine core died
    CORE_INIT = "core_init"  # EngineCore's constructor (free memory on the device)
    CORE_VLLM_PORT = "core_vllm_port"  # get_open_port() reading VLLM_PORT
    CORE_ENVS_CACHE = "core_envs_cache"  # 0.33: enable_envs_cache() at the end of EngineCore init
    CORE_KV_CACHE = "core_kv_cache"  # check_enough_kv_cache_memory
    BUSY_LOOP_NCCL = "busy_loop_nccl"  # an all-reduce with a worker gone
    BUSY_LOOP_DEEPGEMM = "busy_loop_deepgemm"  # loading a DeepGEMM kernel (CUDA error 800)
    BUSY_LOOP_TRITON = "busy_loop_triton"  # loading a Triton kernel (CUDA error 800)


class TracebackDataError(Exception):
    """The data file does not hold a well-formed traceback for every `Traceback`."""


def _frame(which: str, raw: object) -> Frame:
    if not isinstance(raw, dict) or set(raw) != {"file", "line", "function", "code"}:
        raise TracebackDataError(f"{which}: a frame is not {{file, line, function, code}}: {raw}")
    file, line, function, code = raw["file"], raw["line"], raw["function"], raw["code"]
    if not (isinstance(line, int) and all(isinstance(v, str) for v in (file, function, code))):
        raise TracebackDataError(f"{which}: a frame has a value of the wrong type: {raw}")
    return Frame(file, line, function, code)


@cache
def _load() -> dict[Traceback, tuple[Frame, ...]]:
    raw = json.loads(files("labengine").joinpath("data", "tracebacks.json").read_text("utf-8"))
    if not isinstance(raw, dict) or set(raw) != {t.value for t in Traceback}:
        raise TracebackDataError("data/tracebacks.json must name exactly the Traceback members")
    if not all(isinstance(v, list) for v in raw.values()):
        raise TracebackDataError("data/tracebacks.json: each traceback is a list of frames")
    return {Traceback(k): tuple(_frame(k, f) for f in v) for k, v in raw.items()}


def frames(which: Traceback) -> list[Frame]:
    """The frames of one traceback, outermost first."""
    return list(_load()[which])


PYTHON_LIB = "/usr/lib/python3.12"
VLLM_CORE = "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py"


class CoreSite(NamedTuple):
    """The lines of run_engine_core's `except Exception` in vllm/v1/engine/core.py."""

    failed_to_start: int  # logger.exception("EngineCore failed to start.")
    fatal_error: int  # logger.exception("EngineCore encountered a fatal error.")
    reraise: int  # raise e


CORE_SITES = {Era.V0_19: CoreSite(1108, 1110, 1112), Era.V0_33: CoreSite(1584, 1586, 1588)}


def process_died(era: Era, inner: list[Frame]) -> list[Frame]:
    """The engine core process's own traceback once run_engine_core re-raises: multiprocessing's
    bootstrap, the `raise e`, then the frames of the first traceback."""
    return [
        Frame(f"{PYTHON_LIB}/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
        Frame(
            f"{PYTHON_LIB}/multiprocessing/process.py",
            108,
            "run",
            "self._target(*self._args, **self._kwargs)",
        ),
        Frame(VLLM_CORE, CORE_SITES[era].reraise, "run_engine_core", "raise e"),
        *inner,
    ]
