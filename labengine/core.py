"""The engine-core process (`(EngineCore pid=N)` in the logs).

Forked by the API server after config validation, as vLLM spawns its EngineCore. It goes through
vLLM's start-up phases (distributed init, weights download and load, memory profiling, the KV-cache
check, CUDA-graph capture), reports the outcome over a pipe, then serves generation requests
from that pipe. A failure is logged as vLLM logs it and the process exits 1.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from labengine import c10d, loading, mamba, nixl, pytorch
from labengine.logs import VllmLog
from labengine.sites import Site, where
from labengine.textgen import completion, garbage
from labengine.tracebacks import Traceback, frames, process_died
from vllmfacts import arch, envs, memory, xid
from vllmfacts.gpu import MIB, NodeGpus, SharedGpu
from vllmfacts.kvtransfer import FailureType, failure_line, side_channel
from vllmfacts.models import DTYPE_BYTES, ModelInfo, search_paths
from vllmfacts.wording import (
    Era,
    capacity_lines,
    dp_group_leader,
    gib,
    kv_shortage,
    no_kv_memory,
    worker_died,
)

if TYPE_CHECKING:
    from vllmfacts.kvconfig import KVTransferConfig

# Real-world durations (seconds) of the phases that do not depend on model size, from the EKS
# start-failure write-up's logs: the API server resolves config ~9 s after start; the engine core
# hits its distributed init (where VLLM_PORT is read) ~19 s after start; torch.compile 26 s and
# profiling take the 40 s between "Model loading took" and "Available KV cache memory".
CONFIG_RESOLVE_S = 9.0
ENGINE_INIT_S = 9.0
COMPILE_S = 26.0
PROFILE_S = 14.0
GRAPH_CAPTURE_S = 9.0
API_START_S = 2.0
SECONDS_PER_OUTPUT_TOKEN = 0.033  # ~30 tokens/s decode for a 14B AWQ model on one A10G

CUDA_GRAPH_CAPTURE_SIZES = 67
# 0.19's first capture bar under the default FULL_AND_PIECEWISE mode (gpu_model_runner.py:6108)
CAPTURE_DESC = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"


@dataclass(frozen=True)
class CoreSettings:
    era: Era
    model: ModelInfo
    served_name: str
    gpus: NodeGpus
    utilization: float
    max_model_len: int
    derived_max_len: float
    tp: int
    pp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    time_scale: float
    env: dict[str, str]
    headless: bool = False
    dtype: str = ""  # resolved --dtype ("" = the model's own, as with --dtype auto)
    kv_cache_dtype: str = "auto"
    max_logprobs: int = 20  # --max-logprobs (ModelConfig.max_logprobs)
    prefix_caching: bool = True  # --enable-prefix-caching / --no-enable-prefix-caching
    chat_template: bool = True  # --chat-template given, or the tokenizer defines one
    chat_content_format: str = "auto"  # --chat-template-content-format
    max_lora_rank: int | None = None  # --max-lora-rank with --enable-lora; None: LoRA disabled
    lora_modules: tuple[tuple[str, str], ...] = ()  # --lora-modules: (name, path) each
    kv_transfer: KVTransferConfig | None = None  # --kv-transfer-config

    @property
    def world(self) -> int:
        return self.tp * self.pp

    @property
    def process_name(self) -> str:
        """What nvidia-smi shows for the process holding this rank's GPU memory."""
        if self.nnodes > 1 or self.world > 1:
            return f"VLLM::Worker_TP{self.node_rank}"
        return "VLLM::EngineCore"


class EngineStartError(Exception):
    """A start-up phase failed: logged as "EngineCore failed to start." and vLLM's traceback
    ending in `exc_type: message`."""

    def __init__(self, exc_type: str, message: str, traceback: Traceback) -> None:
        super().__init__(f"{exc_type}: {message}")
        self.exc_type_message = f"{exc_type}: {message}"
        self.exc_type = exc_type
        self.message = message
        self.traceback = traceback


def sleep_real(seconds: float, scale: float) -> None:
    if seconds > 0:
        time.sleep(seconds / scale)


def cudagraph_estimate(s: CoreSettings) -> int:
    """The CUDA-graph memory 0.2x+ subtracts from the KV budget (gpu_worker.py:
    determine_available_memory; VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, default 1 from
    v0.21, 0 in 0.19)."""
    if s.era is Era.V0_19 or not envs.truthy(
        s.env, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", True
    ):
        return 0
    return graph_bytes(s)


def memory_plan(s: CoreSettings) -> memory.KvPlan:
    """This rank's start-up memory arithmetic (see vllmfacts.memory)."""
    m = s.model
    dtype = s.dtype or m.dtype
    return memory.plan(
        cuda_total=s.gpus.gpu.cuda_total_bytes,
        utilization=s.utilization,
        loaded_weights=m.loaded_bytes(s.tp, dtype),
        activation_peak=m.activation_peak_bytes(
            s.max_num_batched_tokens, s.max_num_seqs, dtype, s.tp
        ),
        non_torch=memory.profile_non_torch_bytes(s.era, s.gpus.gpu.profile_non_torch_mib),
        layers=m.num_layers // s.pp,
        per_token_per_layer=m.kv_bytes_per_token_per_layer(s.tp, dtype, s.kv_cache_dtype),
        max_model_len=s.max_model_len,
        sliding_layers=m.sliding_layers() // s.pp,
        sliding_window=m.sliding_window,
        max_in_flight_tokens=s.max_num_batched_tokens * s.pp,
        cudagraph=cudagraph_estimate(s),
        era=s.era,
    )


def graph_bytes(s: CoreSettings) -> int:
    if s.enforce_eager:
        return 0
    m = s.model
    return int(m.lab_profile.get("cudagraph_bytes", 0)) or (
        CUDA_GRAPH_CAPTURE_SIZES * int(m.config["hidden_size"]) * m.num_layers * 64
    )


def gpu_bytes(s: CoreSettings, plan: memory.KvPlan) -> int:
    """What the rank holds once serving: weights, KV blocks, CUDA graphs, non-torch memory."""
    return (
        s.model.loaded_bytes(s.tp, s.dtype or None)
        + plan.num_blocks * plan.page_bytes
        + graph_bytes(s)
        + s.gpus.gpu.non_torch_mib * 2**20
    )


def run(settings: CoreSettings, conn: Connection, log: VllmLog) -> int:
    """Start the engine as vLLM's EngineCore does, report ("ready", ...) or ("failed", ...)
    over `conn`, then serve requests from it. The exit code. Its workers (rank 0's, in a group)
    are terminated as it ends, as the executor's shutdown does."""
    with contextlib.ExitStack() as workers:
        return _run(settings, conn, log, workers)


def _run(s: CoreSettings, conn: Connection, log: VllmLog, workers: contextlib.ExitStack) -> int:
    t_init = time.monotonic()
    rank0: Rank0 | None = None
    try:
        _log_config(s, log)
        sleep_real(ENGINE_INIT_S, s.time_scale)
        group = _init_distributed(s, log)
        if group:
            # forked with the executor, before any GPU memory is taken: the lab's per-process
            # GPU files (SharedGpu, held by a lock) stay the engine core's alone
            rank0 = Rank0.start(group, conn, c10d.PG_NCCL_TIMEOUT_S / s.time_scale)
            workers.callback(rank0.stop)
        shared = SharedGpu.from_env(s.gpus.gpu, s.env)
        _check_device(shared)
        _check_free_memory(s, shared)
        _load_weights(s, log, shared)
        plan = _profile(s, log)
        _capture_graphs(s, log, plan, shared)
        log.info(_init_took_site(s), _init_took(s, (time.monotonic() - t_init) * s.time_scale))
        _enable_envs_cache(s)
    except EngineStartError as exc:
        _log_exception(s, log, "EngineCore failed to start.", exc.traceback, exc.exc_type_message)
        conn.send(("failed", exc.exc_type, exc.message))
        conn.close()
        return 1
    if shared:
        shared.allocate(s.process_name, gpu_bytes(s, plan))
    if s.kv_transfer is not None and s.kv_transfer.kv_connector == "NixlConnector":
        # the scheduler's handshake listener, started once the KV caches are registered
        host, port = side_channel(s.env)
        nixl.listen(host, port, str(s.kv_transfer.engine_id))
    conn.send(
        (
            "ready",
            {
                "num_gpu_blocks": plan.num_blocks,
                "kv_tokens": plan.tokens,
                "concurrency": plan.concurrency,
            },
        )
    )
    return _serve(s, conn, log, rank0, shared)


def _init_took_site(s: CoreSettings) -> str:
    """0.33 logs the line from one of two calls: with the compilation time, or without."""
    eager = s.era is not Era.V0_19 and s.enforce_eager
    return where(s.era, Site.INIT_ENGINE_TOOK_EAGER if eager else Site.INIT_ENGINE_TOOK)


def _init_took(s: CoreSettings, seconds: float) -> str:
    head = f"init engine (profile, create kv cache, warmup model) took {seconds:.2f}"
    if s.era is Era.V0_19:
        return f"{head} seconds"
    return f"{head} s" if s.enforce_eager else f"{head} s (compilation: {COMPILE_S:.2f} s)"


def _log_config(s: CoreSettings, log: VllmLog) -> None:
    m = s.model
    log.info(
        where(s.era, Site.ENGINE_CONFIG),
        f"Initializing a V1 LLM engine (v{s.era.version}) with config: model='{m.tag}', "
        f"speculative_config=None, tokenizer='{m.tag}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, "
        f"dtype=torch.{s.dtype or m.dtype}, max_seq_len={s.max_model_len}, download_dir=None, "
        f"load_format=auto, tensor_parallel_size={s.tp}, pipeline_parallel_size={s.pp}, "
        f"data_parallel_size=1, disable_custom_all_reduce=False, "
        f"quantization={'awq_marlin' if m.quantization == 'awq' else m.quantization}, "
        f"enforce_eager={s.enforce_eager}, kv_cache_dtype={s.kv_cache_dtype}, device_config=cuda, "
        f"seed=0, served_model_name={s.served_name}, enable_prefix_caching=True, "
        f"enable_chunked_prefill=True",
    )


def _init_distributed(s: CoreSettings, log: VllmLog) -> list[socket.socket]:
    """get_open_port() reads VLLM_PORT (a Kubernetes service link breaks it here); a group of
    nodes forms at rank 0's store. The sockets to the other ranks."""
    # vLLM logs the process group's init method at DEBUG only: nothing is printed here. From
    # 0.20 on a single node's group meets at a file:// store, and VLLM_PORT is read later.
    if s.era is Era.V0_19:
        try:
            envs.vllm_port(s.era, s.env)
        except envs.EnvError as exc:
            raise EngineStartError("ValueError", str(exc), Traceback.CORE_VLLM_PORT) from exc
    return _host_store(s, log) if s.nnodes > 1 else []


def _enable_envs_cache(s: CoreSettings) -> None:
    """0.33's EngineCore ends its constructor by caching every VLLM_* variable: a bad VLLM_PORT
    fails here, after the weights, the KV cache and the warm-up."""
    if s.era is Era.V0_19:
        return
    try:
        envs.vllm_port(s.era, s.env)
    except envs.EnvError as exc:
        raise EngineStartError("ValueError", str(exc), Traceback.CORE_ENVS_CACHE) from exc


def device_error(shared: SharedGpu | None) -> str | None:
    """What PyTorch raises at the next CUDA call on a device an XID left broken (vllmfacts.xid),
    or None while the device works."""
    broken = xid.fault(shared.dir) if shared else None
    if broken is None:
        return None
    return "torch.AcceleratorError: " + xid.cuda_error(broken).rstrip("\n")


def _check_device(shared: SharedGpu | None) -> None:
    """The worker's init_device makes the device current first (gpu_worker.py:255 in 0.19.1,
    :496 in 0.33.0): on a device an XID broke and nobody reset, that first CUDA call fails."""
    error = device_error(shared)
    if error is not None:
        exc_type, _, message = error.partition(": ")
        raise EngineStartError(exc_type, message, Traceback.CORE_SET_DEVICE)


def _check_free_memory(s: CoreSettings, shared: SharedGpu | None) -> None:
    """vLLM's start-up check: the device's free memory covers gpu_memory_utilization."""
    total = s.gpus.gpu.cuda_total_bytes
    free = total - (shared.used_mib() * MIB if shared else 0)
    requested = math.ceil(total * s.utilization)
    if free < requested:
        msg = (
            f"Free memory on device cuda:0 ({gib(free)}/{gib(total)} GiB) "
            f"on startup is less than desired GPU memory utilization ({s.utilization}, "
            f"{gib(requested)} GiB). Decrease GPU memory utilization or reduce GPU memory used "
            "by other processes."
        )
        raise EngineStartError("ValueError", msg, Traceback.CORE_FREE_MEMORY)


def model_runner_v2(s: CoreSettings) -> bool:
    """Whether the engine runs vLLM's Model Runner V2, which words its loading lines otherwise:
    0.33's default on CUDA for every model the lab serves (config/vllm.py:
    VllmConfig.use_v2_model_runner; none of its unsupported features applies), unless
    VLLM_USE_V2_MODEL_RUNNER says 0. 0.19 has only the V1 runner."""
    if s.era is not Era.V0_33:
        return False
    raw = s.env.get("VLLM_USE_V2_MODEL_RUNNER")
    try:
        return raw is None or bool(int(raw))  # envs.maybe_convert_bool
    except ValueError:
        return True


def _load_weights(s: CoreSettings, log: VllmLog, shared: SharedGpu | None) -> None:
    """Fetch the weights into the (emptyDir) HF cache, then load them onto the GPU shard by
    shard (labengine.loading: the rates and vLLM's progress bar)."""
    m = s.model
    v2 = model_runner_v2(s)
    if v2:
        log.info(where(s.era, Site.LOAD_START_V2), "Loading model from scratch...")
    else:
        log.info(where(s.era, Site.LOAD_START), f"Starting to load model {m.tag}...")
    loaded = m.loaded_bytes(s.tp, s.dtype or None)
    times = loading.load_times(m, loaded, s.gpus.gpu, s.env)
    sleep_real(times.download_s, s.time_scale)
    log.info(
        where(s.era, Site.DOWNLOAD_TIME),
        f"Time spent downloading weights for {m.tag}: {times.download_s:.6f} seconds",
    )
    _load_shards(s, log, times)
    _check_fits_while_loading(s, loaded, shared)
    log.info(where(s.era, Site.WEIGHTS_LOADED), f"Loading weights took {times.load_s:.2f} seconds")
    log.info(
        where(s.era, Site.MODEL_LOADED_V2 if v2 else Site.MODEL_LOADED),
        f"Model loading took {gib(loaded)} GiB memory and "
        f"{times.download_s + times.load_s:.6f} seconds",
    )
    if shared:
        shared.allocate(s.process_name, loaded + s.gpus.gpu.non_torch_mib * MIB)


def _load_shards(s: CoreSettings, log: VllmLog, times: loading.LoadTimes) -> None:
    """vLLM's shard bar: a line as it opens, one per shard, the last again as tqdm closes,
    then the bar format's newline."""
    log.raw(loading.progress_line(0, times.shards, 0.0))
    for n in range(1, times.shards + 1):
        sleep_real(times.per_shard_s, s.time_scale)
        log.raw(loading.progress_line(n, times.shards, n * times.per_shard_s))
    log.raw(loading.progress_line(times.shards, times.shards, times.load_s))
    log.blank()


def _check_fits_while_loading(s: CoreSettings, loaded: int, shared: SharedGpu | None) -> None:
    """Weights larger than the device: torch's caching allocator refuses the tensor that does
    not fit (c10/cuda/CUDACachingAllocator.cpp's OutOfMemoryError text)."""
    total = s.gpus.gpu.cuda_total_bytes
    held = s.gpus.gpu.non_torch_mib * MIB + (
        shared.used_mib(exclude_self=True) * MIB if shared else 0
    )
    if held + loaded <= total:
        return
    # the loader fills the device layer by layer until one layer's tensors no longer fit
    layer = math.ceil(loaded / max(1, s.model.num_layers))
    allocated = (total - held) // layer * layer
    free = total - held - allocated
    in_use = s.gpus.gpu.non_torch_mib * MIB + allocated
    # the device's processes in NVML's list (by pid here): this one, and any other on the GPU
    others = [(p.pid, p.mib * MIB) for p in shared.processes()] if shared else []
    procs = sorted([*[o for o in others if o[0] != os.getpid()], (os.getpid(), in_use)])
    msg = pytorch.cuda_oom(layer, total, free, procs, allocated, allocated)
    raise EngineStartError("torch.OutOfMemoryError", msg, Traceback.CORE_INIT)


def _profile(s: CoreSettings, log: VllmLog) -> memory.KvPlan:
    """torch.compile, a forward pass of max_num_batched_tokens, then the KV-cache check."""
    if not s.enforce_eager:
        log.info(
            where(s.era, Site.COMPILE_CACHE_DIR),
            "Using cache directory: /root/.cache/vllm/torch_compile_cache for vLLM's torch.compile",
        )
        sleep_real(COMPILE_S, s.time_scale)
        log.info(where(s.era, Site.COMPILE_TOOK), f"torch.compile took {COMPILE_S:.2f} s in total")
    sleep_real(PROFILE_S, s.time_scale)
    plan = memory_plan(s)
    # vLLM prints the figure as it is, negative when the non-KV memory exceeds the budget
    log.info(where(s.era, Site.KV_MEMORY), f"Available KV cache memory: {gib(plan.available)} GiB")
    _log_cudagraph_estimate(s, log)
    if plan.check_available <= 0:
        raise EngineStartError("ValueError", no_kv_memory(s.era), Traceback.CORE_NO_KV_MEMORY)
    if not plan.fits:
        est = memory.estimate_max_model_len(
            s.era, plan.available, plan.page_bytes, s.max_model_len, plan.layout
        )
        msg = kv_shortage(s.era, s.max_model_len, plan.needed, plan.check_available, est)
        raise EngineStartError("ValueError", msg, Traceback.CORE_KV_CACHE)
    lines = capacity_lines(s.era, plan.tokens, s.max_model_len, plan.concurrency)
    for site, line in zip((Site.KV_CACHE_SIZE, Site.MAX_CONCURRENCY), lines, strict=False):
        log.info(where(s.era, site), line)
    return plan


def _log_cudagraph_estimate(s: CoreSettings, log: VllmLog) -> None:
    """gpu_worker.py: determine_available_memory's line on the estimate, applied or not."""
    if s.era is Era.V0_19 or not graph_bytes(s):
        return
    util = s.utilization
    delta = graph_bytes(s) / s.gpus.gpu.cuda_total_bytes
    suggested = min(round(util + delta, 4), 1.0)
    if cudagraph_estimate(s):
        log.info(
            where(s.era, Site.CUDAGRAPH_PROFILING_ON),
            "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={util:.4f} is equivalent to "
            f"--gpu-memory-utilization={round(util - delta, 4):.4f} without CUDA graph "
            "memory profiling. To maintain the same effective KV cache size as before, increase "
            f"--gpu-memory-utilization to {suggested:.4f}. "
            "To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
        )
        return
    log.warning(
        where(s.era, Site.CUDAGRAPH_PROFILING_OFF),
        "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). "
        "Without it, CUDA graph memory is not accounted for during KV cache allocation, which "
        "may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it "
        "(the default as of v0.21.0) and increasing --gpu-memory-utilization from "
        f"{util:.4f} to {suggested:.4f}.",
    )


def _capture_graphs(
    s: CoreSettings, log: VllmLog, plan: memory.KvPlan, shared: SharedGpu | None
) -> None:
    graphs = graph_bytes(s)
    if graphs:
        _check_graphs_fit(s, log, plan, graphs, shared)
        sleep_real(GRAPH_CAPTURE_S, s.time_scale)
        log.info(
            where(s.era, Site.GRAPH_CAPTURED_V2 if model_runner_v2(s) else Site.GRAPH_CAPTURED),
            f"Graph capturing finished in {GRAPH_CAPTURE_S:.0f} secs, took {gib(graphs)} GiB",
        )


def graph_headroom(s: CoreSettings, plan: memory.KvPlan, others: int = 0) -> int:
    """What the device has free when capture starts: the profiling run's activations are
    released, the KV blocks are allocated, and the CUDA context, NCCL and cuBLAS (non_torch_mib)
    sit outside PyTorch's budget. 0.19 sizes the KV cache without the graphs
    (gpu_worker.py:332 determine_available_memory), so they go on top of
    --gpu-memory-utilization's share: at a high utilisation this headroom is what they get."""
    held = (
        s.model.loaded_bytes(s.tp, s.dtype or None)
        + plan.num_blocks * plan.page_bytes
        + s.gpus.gpu.non_torch_mib * MIB
        + others
    )
    return s.gpus.gpu.cuda_total_bytes - held


def _check_graphs_fit(
    s: CoreSettings, log: VllmLog, plan: memory.KvPlan, graphs: int, shared: SharedGpu | None
) -> None:
    """Capture (gpu_model_runner.py:5963 capture_model, 0.19.1) records the largest batch
    first into one memory pool, one size after another (_capture_cudagraphs's bar, :6108):
    the size whose pool segment no longer fits raises the caching allocator's OutOfMemoryError
    out of _dummy_run, and EngineCore fails to start. 0.2x+ takes its estimate of the graphs
    from the KV budget first (cudagraph_estimate), which the lab's graphs match: they run short
    only where nothing is taken, 0.19 or VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0. 0.33's
    Model Runner V2 bar (v1/worker/gpu/cudagraph_utils.py:461) is not printed; its traceback
    is cut at compile_or_warm_up_model (v1/engine/core.py:389)."""
    if cudagraph_estimate(s):
        return
    # Other processes on the device are not counted: seeds/000's group restarted beside a
    # 1,417 MiB stranger and captured its graphs, where this arithmetic leaves 801 MiB for the
    # lab's 809 MiB, closer than the model's own precision.
    free = graph_headroom(s, plan)
    if graphs <= free:
        return
    sizes = CUDA_GRAPH_CAPTURE_SIZES
    # the pool grows by whole 2 MiB segments (CUDACachingAllocator's kLargeBuffer rounding)
    segment = math.ceil(graphs / sizes / (2 * MIB)) * 2 * MIB
    done = max(0, free) // segment
    if s.era is Era.V0_19:
        log.raw(loading.tqdm_line(CAPTURE_DESC, done, sizes, done * GRAPH_CAPTURE_S / sizes))
    sleep_real(done * GRAPH_CAPTURE_S / sizes, s.time_scale)
    allocated = s.model.loaded_bytes(s.tp, s.dtype or None) + plan.num_blocks * plan.page_bytes
    allocated += done * segment
    in_use = s.gpus.gpu.non_torch_mib * MIB + allocated
    procs = [(p.pid, p.mib * MIB) for p in shared.processes()] if shared else []
    procs = sorted([*[o for o in procs if o[0] != os.getpid()], (os.getpid(), in_use)])
    left = max(0, free - done * segment)
    msg = pytorch.cuda_oom(segment, s.gpus.gpu.cuda_total_bytes, left, procs, allocated, allocated)
    raise EngineStartError("torch.OutOfMemoryError", msg, Traceback.CORE_CUDA_GRAPHS)


# ---- the tensor-parallel group ------------------------------------------------------------------
#
# Rank 0 hosts the rendezvous store (TCPStore) at master_addr:master_port; each headless node's
# worker connects and sends its rank; the group forms when every rank has joined. Every request is
# then an exchange with every worker (as every forward pass is an all-reduce across ranks): no
# worker, no completion. A stopped worker hangs the request with /health still 200 until the
# engine core's wait for its workers' output times out (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS); the
# other workers stay in the all-reduce until PyTorch's watchdog takes them down.
#
# Rank 0's part is given by a process of its own, as vLLM's multiproc executor runs rank 0's model
# in a worker process the engine core starts (vllm/v1/executor/multiproc_executor.py, WorkerProc,
# 0.33.0), not in the engine core. An engine core killed with a step in flight leaves that worker
# in the step: it completes the collective with the other ranks, and only then finds its parent
# gone (the death pipe, multiproc_executor.py:935-959 in 0.33.0, :755-762 in 0.19.1: the message
# queues shut down and the busy loop's next dequeue raises, shm_broadcast.py:721-726 and
# :873-874). So the headless workers finish the step and block in their next queue read, as they
# do when the engine core dies between steps (seeds/000: the head died inside a forward pass and
# its workers stayed Up, with only the heartbeat monitor's line).
# An engine core that ends by itself (an error, the executor's timeout) terminates its workers
# first (the executor's shutdown), rank 0's with them, whatever step they are in.


def _host_store(s: CoreSettings, log: VllmLog) -> list[socket.socket]:
    srv = socket.create_server((s.master_addr, s.master_port))
    log.info(
        where(s.era, Site.DP_GROUP_LEADER),
        dp_group_leader(s.node_rank, s.master_addr, _host_ip(s), s.world, s.world // s.nnodes),
    )
    peers: dict[int, socket.socket] = {}
    while len(peers) < s.nnodes - 1:
        conn, _ = srv.accept()
        line = conn.makefile("rb").readline()
        try:
            rank = int(json.loads(line)["rank"])
        except (ValueError, KeyError, TypeError):
            conn.close()
            continue
        # a collective is three small messages a token: never held back for an ACK (Nagle)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peers[rank] = conn
    srv.close()
    return [peers[r] for r in sorted(peers)]


STEP_DONE = b'{"op": "done"}\n'
STEP_END = b'{"op": "end"}\n'


def _exchange(group: list[socket.socket], rid: str, timeout_s: float) -> None:
    """One collective: every worker must answer within `timeout_s` (lab seconds), then each
    learns that all have (the all-reduce completes on every rank only once every rank has given
    its part). Raises ConnectionError if one has gone, TimeoutError if one does not answer."""
    msg = (json.dumps({"op": "step", "rid": rid}) + "\n").encode()
    for peer in group:
        peer.sendall(msg)
    deadline = time.monotonic() + timeout_s
    for peer in group:
        buf = b""
        while not buf.endswith(b"\n"):
            peer.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                chunk = peer.recv(4096)
            finally:
                peer.settimeout(None)
            if not chunk:
                raise ConnectionError("peer closed")
            buf += chunk
    for peer in group:
        peer.sendall(STEP_END)


class Rank0:
    """Rank 0's worker process: it gives rank 0's part of each step's collective, one step per
    message from the engine core over a pipe, and answers how the step ended."""

    def __init__(self, pid: int, pipe: Connection) -> None:
        self.pid = pid
        self.pipe = pipe

    @classmethod
    def start(cls, group: list[socket.socket], core_conn: Connection, timeout_s: float) -> Rank0:
        """Fork the worker. `core_conn` (the engine core's pipe to the API server) is closed in
        it, so that the API server finds the engine core gone as soon as the engine core is;
        `timeout_s` (lab seconds) bounds one collective, as the process group's timeout does."""
        ours, theirs = multiprocessing.Pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            code = 0
            try:
                core_conn.close()
                ours.close()
                with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
                    f.write("VLLM::Worker_TP0")
                _rank0_loop(group, theirs, timeout_s)
            except BaseException:
                code = 1
            os._exit(code)
        theirs.close()
        for peer in group:
            peer.close()  # the worker holds the group's connections: they go when it does
        return cls(pid, ours)

    def step(self, rid: str, timeout_s: float) -> None:
        """One step's collective through rank 0's worker. Raises TimeoutError past `timeout_s`
        (lab seconds: the executor's wait for the workers' output), ConnectionError if a rank
        has gone."""
        self.pipe.send(rid)
        if not self.pipe.poll(timeout_s):
            raise TimeoutError("execute_model")
        try:
            ended = self.pipe.recv()
        except EOFError as exc:
            raise ConnectionError("rank 0's worker is gone") from exc
        if ended is not None:
            raise ConnectionError(str(ended))

    def stop(self) -> None:
        """The executor's shutdown: the worker is terminated wherever it is, even in a step."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.pipe.close()


def _rank0_loop(group: list[socket.socket], pipe: Connection, timeout_s: float) -> None:
    """Each step the engine core sends is completed with every rank; the engine core gone (its
    end of the pipe closed), the worker ends, between steps only."""
    while True:
        try:
            rid = pipe.recv()
        except (EOFError, OSError):
            return
        try:
            _exchange(group, str(rid), timeout_s)
            ended: str | None = None
        except TimeoutError:
            return  # past the process group's timeout: PyTorch's watchdog ends rank 0 too
        except OSError as exc:
            ended = f"{type(exc).__name__}: {exc}"
        try:
            pipe.send(ended)
        except OSError:
            return


def execute_model_timeout_s(s: CoreSettings) -> float:
    """How long (real seconds) the engine core waits for its workers' output of one step
    (vllm/envs.py VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 in 0.19 and 0.33; the executor's
    collective_rpc raises `TimeoutError: RPC call to execute_model timed out.` past it)."""
    try:
        return float(int(s.env.get("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300")))
    except ValueError:
        return 300.0


DEEPGEMM_800 = (
    "RuntimeError: CUDA driver error (deepgemm-src/csrc/apis/../jit_kernels/impls/"
    "../../jit/handle.hpp:154): 800 (CUDA_ERROR_NOT_PERMITTED, operation not "
    "permitted)"
)
TRITON_800 = "RuntimeError: Triton Error [CUDA]: operation not permitted"
JIT_HEADROOM_MIB = 512  # loading a freshly compiled kernel module needs room on the device


def _log_exception(s: CoreSettings, log: VllmLog, msg: str, tb: Traceback, final: str) -> None:
    """run_engine_core's `except Exception`: logger.exception(msg), then `raise e` ends the
    process, and multiprocessing prints the traceback again."""
    failed = msg == "EngineCore failed to start."
    site = Site.CORE_FAILED_TO_START if failed else Site.CORE_FATAL_ERROR
    inner = frames(s.era, tb)
    log.logged_exception(where(s.era, site), msg, inner, final)
    log.process_died(s.era.engine_core_name, process_died(s.era, inner), final)


def _host_ip(s: CoreSettings) -> str:
    """vLLM's get_ip(): VLLM_HOST_IP, else this host's address (the head's is master_addr)."""
    return s.env.get("VLLM_HOST_IP") or s.master_addr


# vLLM's pynccl raises RuntimeError(f"NCCL error: {error_str}") with NCCL's own
# ncclGetErrorString(ncclRemoteError) (vllm/distributed/device_communicators/pynccl_wrapper.py
# NCCL_CHECK; NCCL src/init.cc ncclGetErrorString). The ", NCCL version X" suffix is PyTorch's
# (c10d ncclGetErrorWithVersion), on a path this all-reduce does not take.
NCCL_REMOTE_ERROR = "RuntimeError: NCCL error: remote process exited or there was a network error"


def _fatal(s: CoreSettings, log: VllmLog, traceback: Traceback, final: str) -> int:
    _log_exception(s, log, "EngineCore encountered a fatal error.", traceback, final)
    return 1


def _jit_load(s: CoreSettings, shared: SharedGpu | None, log: VllmLog) -> str | None:
    """Load a kernel compiled at run time for a new shape. With another process holding memory
    on this GPU and the headroom thin, the driver refuses: CUDA error 800."""
    if shared is None:
        return None
    others = shared.used_mib(exclude_self=True)
    if others > 0 and shared.free_mib() < JIT_HEADROOM_MIB:
        return DEEPGEMM_800 if envs.truthy(s.env, "VLLM_USE_DEEP_GEMM", True) else TRITON_800
    return None


def _serve(
    s: CoreSettings,
    conn: Connection,
    log: VllmLog,
    rank0: Rank0 | None,
    shared: SharedGpu | None,
) -> int:
    """Request loop: ("gen", rid, prompt, prompt_tokens, max_tokens[, index[, kv params]]) ->
    ("tok", rid, text)* then ("end", rid, finish_reason, n). A fatal error ends the process
    (exit 1), as EngineCore's."""
    per_token = SECONDS_PER_OUTPUT_TOKEN / s.time_scale
    shapes: set[int] = set()
    steps = _Steps(conn, _state_pool(s), s.max_num_batched_tokens)
    handshakes = nixl.Handshakes(s.time_scale)
    while True:
        try:
            msg = steps.next()
        except (EOFError, OSError):
            return 0
        if msg[0] == "shutdown":
            return 0
        if msg[0] == "add_lora":
            conn.send(("utility", _add_lora(s, log, str(msg[1]), str(msg[2]))))
            continue
        if msg[0] != "gen":
            continue
        _, rid, prompt, prompt_tokens, max_tokens, *rest = msg
        choice, params = rest[:1], (rest[1] if len(rest) > 1 else None) or {}
        lost = device_error(shared)
        if lost is not None:
            # the step's first sync with the device reports the broken device: the model
            # runner's copy of the sampled tokens (gpu_model_runner.py _to_list)
            return _fatal(s, log, Traceback.BUSY_LOOP_CUDA_SYNC, lost)
        if not _kv_loaded(s, log, handshakes, rid, int(prompt_tokens), params):
            # kv_load_failure_policy "fail": the request finishes with FINISHED_ERROR
            conn.send(("end", rid, "error", 0))
            continue
        shape = int(prompt_tokens).bit_length()
        if shape not in shapes:
            failure = _jit_load(s, shared, log)
            if failure is not None:
                tb = (
                    Traceback.BUSY_LOOP_DEEPGEMM
                    if failure == DEEPGEMM_800
                    else Traceback.BUSY_LOOP_TRITON
                )
                return _fatal(s, log, tb, failure)
            shapes.add(shape)
        slot, stale = steps.admitted.pop(rid, (None, None))
        computed = mamba.stale_prompt(prompt, stale)
        tokens, reason = completion(s.served_name, computed, max_tokens, *choice)
        if slot is not None and steps.pool is not None:
            steps.pool.release(slot, prompt)
        if prompt_tokens + len(tokens) > s.derived_max_len:
            # Positions past what RoPE was trained on: NaN logits, decoded as token 0.
            tokens, reason = garbage(max_tokens), "length"
        for tok in tokens:
            if rank0 is not None:
                try:
                    rank0.step(rid, execute_model_timeout_s(s) / s.time_scale)
                except TimeoutError:
                    return _fatal(
                        s,
                        log,
                        Traceback.BUSY_LOOP_RPC_TIMEOUT,
                        "TimeoutError: RPC call to execute_model timed out.",
                    )
                except OSError:
                    return _fatal(s, log, Traceback.BUSY_LOOP_NCCL, NCCL_REMOTE_ERROR)
            time.sleep(per_token)
            conn.send(("tok", rid, tok))
        if (
            s.kv_transfer is not None
            and s.kv_transfer.is_kv_producer
            and params.get("do_remote_decode")
        ):
            conn.send(("kv", rid, _remote_prefill_params(s, rid)))
        conn.send(("end", rid, reason, len(tokens)))


def _remote_prefill_params(s: CoreSettings, rid: str) -> dict[str, Any]:
    """What a prefill engine answers for a request to be decoded elsewhere
    (nixl/pull_scheduler.py:278-293): its side channel, as this engine reads its variables."""
    assert s.kv_transfer is not None
    host, port = side_channel(s.env)
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [[1]],
        "remote_engine_id": s.kv_transfer.engine_id,
        "remote_request_id": rid,
        "remote_host": host,
        "remote_port": port,
        "tp_size": s.tp,
    }


def _kv_loaded(
    s: CoreSettings,
    log: VllmLog,
    handshakes: nixl.Handshakes,
    rid: str,
    prompt_tokens: int,
    params: dict[str, Any],
) -> bool:
    """A decode engine's request whose prompt was computed elsewhere: the handshake with the
    prefill engine it names must succeed first. False (logged as vLLM's worker logs it) when
    it fails; True for every other request."""
    kv = s.kv_transfer
    if kv is None or not kv.is_kv_consumer or not params.get("do_remote_prefill"):
        return True
    host, port = str(params.get("remote_host")), int(params.get("remote_port") or 0)
    local = list(range(1, -(-prompt_tokens // 16) + 1))  # block 0 is the null block
    remote_blocks = params.get("remote_block_ids") or []
    engine = str(params.get("remote_engine_id"))
    try:
        handshakes.ensure(host, port, engine)
    except nixl.HandshakeError as exc:
        base = {"engine_id": kv.engine_id}
        setup = {"failure_type": str(FailureType.SETUP), "request_id": None, **base}
        # logged with exc_info: the record ends in the exception (its frames, which run
        # through concurrent.futures and pyzmq, are not reproduced)
        setup_line = failure_line(FailureType.SETUP, {**setup, "remote_engine_id": engine})
        log.error(where(s.era, Site.NIXL_SETUP_FAILED), f"{setup_line}\n{exc.final}")
        request = {
            "failure_type": str(FailureType.REQUEST),
            "request_id": rid,
            **base,
            "remote_engine_id": engine,
            "remote_request_id": params.get("remote_request_id"),
            "remote_host": host,
            "remote_port": port,
            # the blocks allocated for the prompt here, and those the prefill engine holds
            "num_local_blocks": len(local),
            "num_remote_blocks": sum(len(g) for g in remote_blocks if isinstance(g, list)),
            "local_block_ids_sample": local[:10],
        }
        request_line = failure_line(FailureType.REQUEST, request)
        log.error(where(s.era, Site.NIXL_HANDSHAKE_FAILED), f"{request_line}\n{exc.final}")
        return False
    return True


def _add_lora(s: CoreSettings, log: VllmLog, name: str, path: str) -> str | None:
    """The engine core's add_lora utility call: the adapter's rank (adapter_config.json's `r`)
    against --max-lora-rank, as the worker's PEFTHelper.validate_legal checks it before loading
    any weights (lora/peft_helper.py:122 in 0.19.1, :196 in 0.33.0). The failure message the
    client gets (v1/engine/core.py:1309, :1850); None when the adapter loads."""
    if s.max_lora_rank is None:
        # without --enable-lora the model runner has no LoRA manager
        # (v1/worker/lora_model_runner_mixin.py:71 in 0.19.1); its short traceback is not modelled
        error = "LoRA is not enabled. Use --enable-lora to enable LoRA."
        log.error(where(s.era, Site.UTILITY_FAILED), "Invocation of add_lora method failed")
        log.raw(f"RuntimeError: {error}")
        return f"Call to add_lora method failed: {error}"
    try:
        with open(os.path.join(_adapter_dir(path), "adapter_config.json")) as f:
            rank = int(json.load(f)["r"])
    except FileNotFoundError:
        # the worker raises LoRAAdapterNotFoundError (vllm/exceptions.py:62 in 0.19.1) from the
        # FileNotFoundError; that chained traceback is not modelled, only its last line
        error = f"Loading lora {name} failed: No adapter found for {path}"
        log.error(where(s.era, Site.UTILITY_FAILED), "Invocation of add_lora method failed")
        log.raw(f"vllm.exceptions.LoRAAdapterNotFoundError: {error}")
    else:
        if rank <= s.max_lora_rank:
            return None
        error = f"LoRA rank {rank} is greater than max_lora_rank {s.max_lora_rank}."
        log.logged_exception(
            where(s.era, Site.UTILITY_FAILED),
            "Invocation of add_lora method failed",
            frames(s.era, Traceback.CORE_ADD_LORA),
            f"ValueError: {error}",
        )
    return f"Call to add_lora method failed: {error}"


def _adapter_dir(path: str) -> str:
    """get_adapter_absolute_path (lora/utils.py:283 in 0.19.1): an absolute, `~` or existing
    path as it is; anything else is a Hugging Face repository id, which the lab "downloads" from
    its model folders, as it resolves a model tag."""
    if os.path.isabs(path) or path.startswith("~") or os.path.exists(path):
        return os.path.abspath(os.path.expanduser(path))
    for base in search_paths():
        if (base / path).is_dir():
            return str(base / path)
    return path


def _state_pool(s: CoreSettings) -> mamba.StatePool | None:
    """A hybrid model's Mamba state slots, from the memory the KV pool gets; None otherwise."""
    if not arch.is_jamba(s.model.config):
        return None
    dtype_bytes = DTYPE_BYTES[s.dtype or s.model.dtype]
    pool = max(0, memory_plan(s).available)
    return mamba.StatePool.sized(s.model.config, pool, dtype_bytes, mamba.build_bugs(s.env))


class _Steps:
    """The scheduler's steps over the pipe: every request already waiting when the engine core
    takes the next one is scheduled together, within the step's token budget
    (max_num_batched_tokens), and gets its state slot then (labengine.mamba.admit)."""

    def __init__(self, conn: Connection, pool: mamba.StatePool | None, budget: int) -> None:
        self.conn = conn
        self.pool = pool
        self.budget = budget
        self.waiting: deque[tuple[Any, ...]] = deque()
        self.admitted: dict[str, tuple[int, str | None]] = {}

    def next(self) -> tuple[Any, ...]:
        if not self.waiting:
            self.waiting.append(self.conn.recv())
            while self.conn.poll():
                self.waiting.append(self.conn.recv())
            if self.pool is not None:
                new = [m for m in self.waiting if m[0] == "gen"]
                slots = mamba.admit(self.pool, [int(m[3]) for m in new], self.budget)
                self.admitted.update(
                    (m[1], slot) for m, slot in zip(new, slots, strict=True) if slot is not None
                )
        msg = self.waiting.popleft()
        if self.pool is not None and msg[0] == "gen" and msg[1] not in self.admitted:
            # it waited for a state slot: the requests before it have released theirs
            [slot] = mamba.admit(self.pool, [int(msg[3])], self.budget)
            assert slot is not None  # a request is served only after the one before released
            self.admitted[msg[1]] = slot
        return msg


# ---- a headless worker node ---------------------------------------------------------------------


def heartbeat_line(rank: int) -> str:
    """The heartbeat monitor's warning, under c10's prefix with the group's rank set."""
    return (
        f"{pytorch.c10_prefix('W', 'ProcessGroupNCCL.cpp', 1826, rank)}"
        f"[PG ID 0 PG GUID 0 Rank {rank}] "
        'Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut '
        "down too early), with error: Broken pipe"
    )


def _await_end(peer: socket.socket, reader: Any, timeout_s: float, poll_s: float) -> float | None:
    """Wait for the collective to complete on every rank. None once it has; else how long
    (lab seconds) it ran before the watchdog found it timed out. The parts come from the other
    ranks, so rank 0 going away meanwhile does not end the wait: only the timeout does."""
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        peer.settimeout(left)
        try:
            line = reader.readline()
        except OSError:  # the timeout, or rank 0's socket gone
            line = b""
        finally:
            peer.settimeout(None)
        if line == STEP_END:
            return None
        if not line:
            time.sleep(max(deadline - time.monotonic(), 0.0))
    time.sleep(poll_s)  # the watchdog looks every kWatchdogThreadSleepMillis
    return time.monotonic() - start


def _taken_down(s: CoreSettings, launcher: VllmLog, seq: int, ran_s: float) -> int:
    """PyTorch's watchdog lines and the abort (SIGABRT: -6), then run_headless's worker monitor
    notices the worker died and returns, and `vllm serve` exits 0."""
    import sys

    numel = int(s.model.config.get("hidden_size", 0))
    timeout_ms = int(c10d.PG_NCCL_TIMEOUT_S * 1000)
    lines = c10d.watchdog_timeout(s.node_rank, seq, numel, int(ran_s * 1000), timeout_ms)
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    launcher.error(
        where(s.era, Site.WORKER_DIED), worker_died(s.era, f"VllmWorker-{s.node_rank}", -6)
    )
    return 0


def worker_name(s: CoreSettings) -> str:
    """How vLLM's log names a headless node's worker process."""
    return f"Worker_TP{s.node_rank}"


def run_worker(s: CoreSettings, log: VllmLog, launcher: VllmLog | None = None) -> int:
    """A headless node's worker: join rank 0's store, answer every collective, and when rank 0
    goes away block forever (vLLM prints nothing) while PyTorch's heartbeat monitor complains
    every TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC. It never rejoins. A collective some rank never
    completes ends with PyTorch's watchdog taking the worker down, and the node's launcher
    (`launcher`: run_headless's worker monitor) returning: exit 0."""
    import sys

    scale = s.time_scale
    shared = SharedGpu.from_env(s.gpus.gpu, s.env)
    log.rebind(worker_name(s))
    while True:
        try:
            peer = socket.create_connection((s.master_addr, s.master_port), timeout=5)
            break
        except OSError:
            time.sleep(max(1.0 / scale, 0.01))
    peer.settimeout(None)
    peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    peer.sendall((json.dumps({"rank": s.node_rank}) + "\n").encode())
    if shared:
        shared.allocate(s.process_name, gpu_bytes(s, memory_plan(s)))
    reader = peer.makefile("rb")
    seq = 0
    while True:
        try:
            line = reader.readline()
        except OSError:
            line = b""
        if not line:
            break
        seq += 1
        peer.sendall(STEP_DONE)
        ran_s = _await_end(
            peer, reader, c10d.PG_NCCL_TIMEOUT_S / scale, c10d.WATCHDOG_POLL_S / scale
        )
        if ran_s is not None:
            return _taken_down(s, launcher or log, seq, ran_s * scale)
    # rank 0 is gone: the worker blocks in a queue read forever; only the heartbeat speaks
    interval = float(s.env.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "480"))
    while True:
        time.sleep(interval / scale)
        sys.stderr.write(heartbeat_line(s.node_rank) + "\n")
        sys.stderr.flush()
