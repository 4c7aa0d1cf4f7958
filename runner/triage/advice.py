"""Advice computed from the numbers a log shows.

A KV-cache shortage (a signature capturing `max_len`, `needed` and `available`, in GiB) gets the
`--max-model-len` that fits the memory the log reports, and the `--gpu-memory-utilization` that
would fit the requested length (on vLLM's CPU platform, whose budget is `VLLM_CPU_KVCACHE_SPACE`
and whose blocks are 128 tokens, the whole GiB of that variable). Where the log names a model
the lab engine knows (vllmfacts.models), the lab engine's own arithmetic gives the KV cache per
token (vllmfacts.memory) where it agrees with the message's "needed" figure; else the message's
own numbers give it by proportion. The advice says which.
Figures no vLLM could have run with (not finite, not positive, a tensor-parallel size that does
not divide the model's heads) give no numbers: the advice says which figure and why.

A start-up refused for free memory (captures `free`, `total`, `util`, `requested`) gets what
another process holds and the utilisation that would fit beside it; an engine's death (a capture
`death`) whose paste shows no root cause gets where that cause is; a stalled engine (stats
lines with `running` requests) how to see it and what brings it back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from runner.triage.cause import shows_cause
from runner.triage.match import Log
from runner.triage.xid import GPU_LOST, GPUD_REASON, PLUGIN_XID, XID_LINE
from runner.triage.xid import advice as xid_advice
from vllmfacts import memory
from vllmfacts.gpu import gpu_types
from vllmfacts.models import ModelInfo, ModelNotFound, resolve
from vllmfacts.wording import Era

GIB = 2**30

_MODEL = re.compile(
    r"(?:Starting to load model|Loading model|model=|'model(?:_tag)?': )\s*'?"
    r"(?P<tag>[\w.-]+/[\w.-]*[\w-])"
)
_UTIL = re.compile(r"gpu_memory_utilization'?(?:[=:]\s*'?| \()(?P<v>\d+(?:\.\d+)?)")
_TP = re.compile(r"tensor_parallel_size'?[=:]\s*(?P<v>\d+)")
_BATCHED = re.compile(r"max_num_batched_tokens'?[=:]\s*(?P<v>\d+)")
_TOTAL = re.compile(
    r"total_gpu_memory \((?P<v>\d+(?:\.\d+)?) ?GiB\)|total capacity of (?P<w>\d+(?:\.\d+)?) GiB"
)
# vLLM's CPU platform: the KV budget it was given (vllm/v1/worker/cpu_worker.py,
# CPUWorker.determine_available_memory)
_CPU_BUDGET = re.compile(
    r"(?:Explicitly|Auto) set \((?P<v>\d+(?:\.\d+)?)/\d+(?:\.\d+)?\) GiB for KV cache on node"
)
# the V0 CPU worker's shortage names its own budget (vllm/worker/cpu_worker.py)
_CPU_V0 = re.compile(r"Try increasing `VLLM_CPU_KVCACHE_SPACE`")
# a GPU XID's own line (the driver's, gpud's or the device plugin's; the driver's GPU-lost line
# for 79), which names the XID the advice explains
_XID_EVIDENCE = tuple(re.compile(p) for p in (XID_LINE, GPUD_REASON, PLUGIN_XID, GPU_LOST))
DEFAULT_BATCHED = 2048  # `vllm serve`'s max_num_batched_tokens on a GPU under 70 GiB
AGREE = 0.05  # the model arithmetic is used where its need is within 5 % of the message's
_LABEL = {
    "max_len": "max seq len",
    "needed": "GiB needed",
    "available": "GiB available",
    "tokens": "KV cache tokens",
    "free": "GiB free",
    "total": "GiB total",
    "util": "GPU memory utilization",
    "requested": "GiB requested",
}


def _first(rx: re.Pattern[str], log: Log) -> re.Match[str] | None:
    hit = log.first(rx)
    return hit[1] if hit else None


class Unusable(Exception):
    """A figure in the log that no vLLM run could have shown; the message says which and why."""


def _number(caps: Mapping[str, str], key: str) -> float | None:
    try:
        v = float(caps[key].replace(",", ""))
    except (KeyError, ValueError):
        return None
    if not math.isfinite(v):
        shown = caps[key] if len(caps[key]) <= 24 else caps[key][:20] + "..."
        raise Unusable(f"the log's {_LABEL[key]} ({shown}) is not a finite number")
    return v if v > 0 else None  # a masked figure reads as zeros: no figure


def _tp(info: ModelInfo, log: Log) -> int:
    """The log's tensor-parallel size, checked as vLLM checks it: it divides the attention heads,
    and the KV heads divide it or it divides them (vllm/config/model.py,
    QKVParallelLinear)."""
    m = _first(_TP, log)
    tp = int(m.group("v")) if m else 1
    heads, kv = int(info.config["num_attention_heads"]), info.num_kv_heads
    if tp < 1:
        raise Unusable(f"tensor_parallel_size={tp} is not a size vLLM runs with (at least 1)")
    if heads % tp or (kv % tp and tp % kv):
        raise Unusable(
            f"tensor_parallel_size={tp} does not divide {info.tag}'s {heads} attention heads "
            f"and {kv} KV heads as vLLM requires"
        )
    return tp


def _model(log: Log) -> ModelInfo | None:
    m = _first(_MODEL, log)
    if m is None:
        return None
    try:
        return resolve(m.group("tag"))
    except (ModelNotFound, OSError, ValueError, KeyError):
        return None


def _gpu_total(log: Log) -> tuple[float, str] | None:
    """The GPU's memory in GiB, and where it came from."""
    m = _first(_TOTAL, log)
    if m:
        return float(m.group("v") or m.group("w")), "the log's total GPU memory"
    for gpu in gpu_types().values():
        if log.first(re.compile(re.escape(gpu.name))):
            return gpu.cuda_total_bytes / GIB, f"the {gpu.name} the log names"
    return None


def _utilization(log: Log, short: float, max_len: int) -> str:
    """The --gpu-memory-utilization line: how much more of the GPU the missing KV budget is."""
    total = _gpu_total(log)
    util = _first(_UTIL, log)
    if total is None:
        return (
            f"--gpu-memory-utilization: raise it by {short:.2f} GiB / the GPU's memory "
            "(the log names neither the GPU nor its total memory)"
        )
    gib, source = total
    if not (math.isfinite(gib) and gib > 0):
        return f"--gpu-memory-utilization: no figure ({source} reads {gib:g} GiB)"
    step = math.ceil(short / gib * 100) / 100
    if util is None:
        return f"--gpu-memory-utilization: {step:.2f} more than now (GPU from {source})"
    now = float(util.group("v"))
    if not 0 < now <= 1:
        return f"--gpu-memory-utilization: no figure (the log's {now:g} is not in (0, 1])"
    new = now + step
    fits = "; above 0.95 leaves too little for CUDA itself" if new > 0.95 else ""
    return (
        f"--gpu-memory-utilization {new:.2f} fits --max-model-len {max_len} "
        f"(now {util.group('v')}; GPU from {source}){fits}"
    )


def _fit_len_by_model(
    info: ModelInfo,
    log: Log,
    era: Era,
    max_len: int,
    available: float,
    block: int = memory.BLOCK_SIZE,
) -> tuple[int, float]:
    """(the longest fitting length, GiB one request of max_len needs) from the lab engine."""
    batched = _first(_BATCHED, log)
    layout = memory.KvLayout(
        block_size=block,
        full_layers=info.num_layers - info.sliding_layers(),
        per_token_per_layer=info.kv_bytes_per_token_per_layer(_tp(info, log)),
        sliding_layers=info.sliding_layers(),
        sliding_window=info.sliding_window,
        max_in_flight_tokens=int(batched.group("v")) if batched else DEFAULT_BATCHED,
    )
    avail = int(available * GIB)
    fit = memory.estimate_max_model_len(era, avail, layout.page_bytes, max_len, layout)
    return fit, layout.needed(max_len) / GIB


def _cpu_budget(budget: float, needed: float, available: float, max_len: int) -> str:
    """The VLLM_CPU_KVCACHE_SPACE line: whole GiB (vLLM reads it with int()) that hold one
    request of max_len and the block the check holds back (budget less the message's
    available)."""
    held = max(0.0, budget - available)
    new = math.ceil(needed + held - 1e-9)
    return (
        f"VLLM_CPU_KVCACHE_SPACE={new} (whole GiB; now {budget:g}) fits --max-model-len "
        f"{max_len}: on vLLM's CPU platform the KV budget is that variable, not "
        "--gpu-memory-utilization"
    )


def kv_shortage(caps: Mapping[str, str], text: str, log: Log) -> list[str]:
    """Advice for a KV shortage from its captured numbers, or none when the figures are missing.
    Raises Unusable for a figure no vLLM run could have shown."""
    max_len, needed, available = (_number(caps, k) for k in ("max_len", "needed", "available"))
    if max_len is None or needed is None or available is None:
        return []
    if needed <= available:
        raise Unusable(f"the log's {needed:g} GiB needed is not more than its {available:g} GiB")
    era = Era.V0_33 if "model's max seq len" in text or "which also controls" in text else Era.V0_19
    info = _model(log)
    cpu = _first(_CPU_BUDGET, log)
    block = memory.CPU_BLOCK_SIZE if cpu else memory.BLOCK_SIZE
    how = "by proportion from the message's own figures; the log names no model gameday knows"
    fit = int(available / needed * max_len) // block * block
    if info is not None:
        # on the CPU the message's available is what the check compares with, already net of
        # the null block, and vLLM's estimate searches it as it is
        fit_era = Era.V0_19 if cpu else era
        by_model, model_needed = _fit_len_by_model(
            info, log, fit_era, int(max_len), available, block
        )
        if abs(model_needed - needed) <= AGREE * needed:
            fit, needed = by_model, model_needed
            how = f"by the lab engine's arithmetic for {info.tag}"
        else:
            how = (
                f"by proportion from the message's own figures: the lab engine's arithmetic for "
                f"{info.tag} needs {model_needed:.2f} GiB for {int(max_len)} tokens, so the log's "
                "settings differ from the ones gameday knows"
            )
    short = needed - available
    return [
        f"--max-model-len {fit} fits the {available:g} GiB of KV cache available ({how})",
        f"--max-model-len {int(max_len)} needs {needed:.2f} GiB: {short:.2f} GiB more KV budget",
        _cpu_budget(float(cpu.group("v")), needed, available, int(max_len))
        if cpu
        else _utilization(log, short, int(max_len)),
    ]


def kv_tokens(caps: Mapping[str, str], log: Log) -> list[str]:
    """Advice for the V0 engine's shortage, worded in tokens (vllm/worker/worker.py
    raise_if_cache_size_invalid): the message's own capacity is the length that fits, and the
    requested length needs that many times the KV budget."""
    max_len, tokens = _number(caps, "max_len"), _number(caps, "tokens")
    if max_len is None or tokens is None:
        return []
    if max_len <= tokens:
        raise Unusable(f"the log's max seq len {max_len:g} fits its {tokens:g} tokens of KV cache")
    cpu = log.first(_CPU_V0) is not None
    budget = "VLLM_CPU_KVCACHE_SPACE" if cpu else "--gpu-memory-utilization"
    return [
        f"--max-model-len {int(tokens)} fits the KV cache the V0 engine allocated (the message's "
        f"own figure: {int(tokens)} tokens)",
        f"--max-model-len {int(max_len)} needs {max_len / tokens:.2f}x the KV cache it got: give "
        f"the KV cache that much more memory ({budget})",
    ]


NVIDIA_SMI = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"


# a device whose GPU memory is the host's own RAM: NVIDIA's GB10 (DGX Spark, compute capability
# 12.1) and its Jetson modules, named by the log or by its writer; without flags, so that
# Log.first narrows the lines with RE2 before Python's re reads them
_UNIFIED = re.compile(
    r"\bGB10\b|\bDGX Spark\b|\bsm_?121a?\b|\b[Jj]etson\b|\b[Uu]nified [Mm]emory\b"
)


def free_memory(caps: Mapping[str, str], log: Log) -> list[str]:
    """Advice for vLLM's start-up check (vllm/v1/worker/utils.py request_memory): the device
    had `free` of `total` GiB free, and `util` of it (`requested` GiB) is the engine's budget.
    What is not free then is another process's (and this engine's own CUDA context, a few
    hundred MiB: the check runs after the device is initialised); on a device with unified
    memory, whose GPU memory is the host's RAM, also what the host's own programs and its file
    cache hold. Raises Unusable for figures no vLLM run could show."""
    free, total, util, requested = (
        _number(caps, k) for k in ("free", "total", "util", "requested")
    )
    if free is None or total is None or util is None or requested is None:
        return []
    if util > 1:
        raise Unusable(f"the log's utilisation {util:g} is not in (0, 1]")
    if free >= requested or free > total:
        raise Unusable(
            f"the log's {free:g} GiB free is not below its {requested:g} GiB budget and its "
            f"{total:g} GiB total"
        )
    held = total - free
    fits = math.floor(free / total * 100) / 100
    unified = (
        [
            "this device's GPU memory is the host's RAM (unified memory: the log names a GB10, "
            "a DGX Spark or a Jetson), so what the operating system, other programs and the file "
            "cache hold counts as in use too; check `free -g` on the host, stop what holds "
            "memory there, or free the file cache (`sync; echo 3 | sudo tee "
            "/proc/sys/vm/drop_caches`)"
        ]
        if _first(_UNIFIED, log)
        else []
    )
    return [
        *unified,
        f"another process holds GPU memory: {held:.2f} GiB of the device's {total:g} GiB was in "
        f"use when vLLM started (its own CUDA context is a few hundred MiB of it), so "
        f"--gpu-memory-utilization {util:g} ({requested:g} GiB) did not fit in the {free:g} GiB "
        f"free; list what holds it on the node: {NVIDIA_SMI}",
        "stop that process (a stray server, an engine from an earlier run that did not exit, a "
        "notebook), then start vLLM again",
        f"--gpu-memory-utilization {fits:.2f} would fit the free memory, but the engine then "
        "shares the GPU with that process: a kernel loaded at run time may be refused (CUDA "
        "error 800, this scenario's runtime failure)",
    ]


def engine_death(log: Log) -> list[str]:
    """Where the root cause of an engine's death is when the paste shows none
    (runner.triage.cause)."""
    if shows_cause(log):
        return []
    return [
        "the paste shows no root cause: vLLM logs it as the engine core's traceback before this "
        '(after "EngineCore encountered a fatal error."); paste the lines before it. Where the '
        "engine core logged none, it was killed from outside (SIGKILL, the kernel's OOM killer: "
        "`dmesg | grep -i 'killed process'` on the node)",
    ]


def advise(evidence_caps: Sequence[tuple[Mapping[str, str], str]], log: Log) -> list[str]:
    """Advice from the first evidence with KV-shortage figures. Figures that cannot be computed
    with give one line saying why, in place of numbers."""
    for caps, text in evidence_caps:
        if {"max_len", "tokens"} <= caps.keys():
            try:
                return kv_tokens(caps, log)
            except Unusable as exc:
                return [f"no numeric advice: {exc}"]
        if {"max_len", "needed", "available"} <= caps.keys():
            try:
                return kv_shortage(caps, text, log)
            except Unusable as exc:
                return [f"no numeric advice: {exc}"]
            except ArithmeticError as exc:
                return [f"no numeric advice: the log's figures cannot be computed with ({exc})"]
        if {"free", "total", "util", "requested"} <= caps.keys():
            try:
                return free_memory(caps, log)
            except Unusable as exc:
                return [f"no numeric advice: {exc}"]
    if any(rx.search(text) for _, text in evidence_caps for rx in _XID_EVIDENCE):
        return xid_advice(log)
    if any("death" in caps for caps, _ in evidence_caps):
        return engine_death(log)
    for caps, _ in evidence_caps:
        if {"running", "lines"} <= caps.keys():
            return stalled(caps["running"], caps["lines"])
    return []


def stalled(running: str, lines: str) -> list[str]:
    """Advice for an engine whose stats lines show it stalled (runner.triage.stall)."""
    return [
        f"{running} request(s) running and not one token made over {lines} stats lines; /health "
        "answers 200 for such an engine (it only notices an engine core that exited): probe "
        "with an inference request, not /health",
        "`py-spy dump --pid <pid>` of the process titled VLLM::EngineCore shows where it is "
        "stuck; then restart the server (nothing else ends the hang)",
    ]
