"""The engine-core process (`(EngineCore pid=N)` in the logs).

Forked by the API server after config validation, as vLLM spawns its EngineCore. It goes through
vLLM's start-up phases (distributed init, weights download and load, memory profiling, the KV-cache
check, CUDA-graph capture), reports the outcome over a pipe, then serves generation requests
from that pipe. A failure is logged as vLLM logs it and the process exits 1.
"""

from __future__ import annotations

import math
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from labengine import envs, memory
from labengine.gpu import NodeGpus
from labengine.logs import VllmLog
from labengine.models import ModelInfo
from labengine.textgen import completion, garbage
from labengine.wording import Era, capacity_lines, gib, kv_shortage, no_kv_memory

# Real-world durations (seconds) of the phases that do not depend on model size, from the seeds'
# logs: the API server resolves config ~9 s after start; the engine core hits its distributed
# init (where VLLM_PORT is read) ~19 s after start; torch.compile 26 s and profiling take the 40 s
# between "Model loading took" and "Available KV cache memory".
CONFIG_RESOLVE_S = 9.0
ENGINE_INIT_S = 9.0
COMPILE_S = 26.0
PROFILE_S = 14.0
GRAPH_CAPTURE_S = 9.0
API_START_S = 2.0
SECONDS_PER_OUTPUT_TOKEN = 0.033  # ~30 tokens/s decode for a 14B AWQ model on one A10G

CUDA_GRAPH_CAPTURE_SIZES = 67


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


class EngineStartError(Exception):
    """Raised inside the engine core; logged as "EngineCore failed to start."."""


def sleep_real(seconds: float, scale: float) -> None:
    if seconds > 0:
        time.sleep(seconds / scale)


def _fail(log: VllmLog, conn: Connection, exc_type: str, msg: str, frames: list[Any]) -> int:
    log.error("core.py:1108", "EngineCore failed to start.")
    log.traceback(frames, f"{exc_type}: {msg}")
    conn.send(("failed", exc_type, msg))
    conn.close()
    return 1


_CORE_FRAMES = [
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py",
        1099,
        "run_engine_core",
        "engine_core = EngineCoreProc(*args, **kwargs)",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py",
        827,
        "__init__",
        "super().__init__(",
    ),
]
_PORT_FRAMES = [
    *_CORE_FRAMES,
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/utils/network_utils.py",
        213,
        "get_open_port",
        "port = envs.VLLM_PORT",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/envs.py",
        1607,
        "__getattr__",
        "value = environment_variables[name]()",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/envs.py",
        220,
        "get_vllm_port",
        "raise ValueError(f\"VLLM_PORT '{port}' appears to be a URI. \" ...",
    ),
]
_KV_FRAMES = [
    *_CORE_FRAMES,
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py",
        124,
        "__init__",
        "self._initialize_kv_caches(vllm_config)",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py",
        1285,
        "check_enough_kv_cache_memory",
        "raise ValueError(",
    ),
]


def run(settings: CoreSettings, conn: Connection, log: VllmLog) -> int:
    s = settings
    scale = s.time_scale
    m = s.model
    t_init = time.monotonic()
    log.info(
        "core.py:93",
        f"Initializing a V1 LLM engine (v{s.era.version}) with config: model='{m.tag}', "
        f"speculative_config=None, tokenizer='{m.tag}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, "
        f"dtype=torch.{m.dtype}, max_seq_len={s.max_model_len}, download_dir=None, "
        f"load_format=auto, tensor_parallel_size={s.tp}, pipeline_parallel_size={s.pp}, "
        f"data_parallel_size=1, disable_custom_all_reduce=False, "
        f"quantization={'awq_marlin' if m.quantization == 'awq' else m.quantization}, "
        f"enforce_eager={s.enforce_eager}, kv_cache_dtype=auto, device_config=cuda, "
        f"seed=0, served_model_name={s.served_name}, enable_prefix_caching=True, "
        f"enable_chunked_prefill=True",
    )
    sleep_real(ENGINE_INIT_S, scale)

    # Distributed init: get_open_port() reads VLLM_PORT. A Kubernetes service link breaks it here.
    try:
        base_port = envs.vllm_port(s.era, s.env)
    except envs.EnvError as exc:
        return _fail(log, conn, "ValueError", str(exc), _PORT_FRAMES)
    port = base_port if base_port is not None else _free_port()
    world = s.tp * s.pp
    init_method = (
        f"tcp://{s.master_addr}:{s.master_port}" if s.nnodes > 1 else (f"tcp://127.0.0.1:{port}")
    )
    log.info(
        "parallel_state.py:1208",
        f"world_size={world} rank={s.node_rank} local_rank=0 "
        f"distributed_init_method={init_method} backend=nccl",
    )
    if s.nnodes > 1:
        _wait_for_group(s, log)

    free = s.gpus.gpu.cuda_total_bytes  # nothing else holds this node's GPU memory yet
    requested = math.ceil(s.gpus.gpu.cuda_total_bytes * s.utilization)
    if free < requested:
        msg = (
            f"Free memory on device cuda:0 ({gib(free)}/{gib(s.gpus.gpu.cuda_total_bytes)} GiB) "
            f"on startup is less than desired GPU memory utilization ({s.utilization}, "
            f"{gib(requested)} GiB). Decrease GPU memory utilization or reduce GPU memory used "
            "by other processes."
        )
        return _fail(log, conn, "ValueError", msg, _CORE_FRAMES)

    # Weights: fetch into the (emptyDir) HF cache, then load onto the GPU.
    log.info("gpu_model_runner.py:2338", f"Starting to load model {m.tag}...")
    loaded = m.loaded_bytes(s.tp)
    download_s = (loaded / 2**30) / s.gpus.gpu.download_gib_s
    weights_s = (loaded / 2**30) / s.gpus.gpu.load_gib_s
    log.info("weight_utils.py:392", "Using model weights format ['*.safetensors']")
    sleep_real(download_s, scale)
    log.info(
        "weight_utils.py:413",
        f"Time spent downloading weights for {m.tag}: {download_s:.6f} seconds",
    )
    sleep_real(weights_s, scale)
    log.info("default_loader.py:384", f"Loading weights took {weights_s:.2f} seconds")
    log.info(
        "gpu_model_runner.py:4820",
        f"Model loading took {gib(loaded)} GiB memory and {download_s + weights_s:.6f} seconds",
    )

    # Profiling run: torch.compile, then a forward pass of max_num_batched_tokens.
    if not s.enforce_eager:
        log.info("backends.py:548", "Using cache directory: /root/.cache/vllm/torch_compile_cache")
        sleep_real(COMPILE_S, scale)
        log.info("monitor.py:34", f"torch.compile takes {COMPILE_S:.2f} s in total")
    sleep_real(PROFILE_S, scale)
    plan = memory.plan(
        cuda_total=s.gpus.gpu.cuda_total_bytes,
        utilization=s.utilization,
        loaded_weights=loaded,
        activation_peak=m.activation_peak_bytes(s.max_num_batched_tokens, s.max_num_seqs),
        non_torch=s.gpus.gpu.non_torch_mib * 2**20,
        layers=m.num_layers // s.pp,
        per_token_per_layer=m.kv_bytes_per_token_per_layer(s.tp),
        max_model_len=s.max_model_len,
    )
    log.info("gpu_worker.py:436", f"Available KV cache memory: {gib(max(plan.available, 0))} GiB")
    if plan.available <= 0:
        return _fail(log, conn, "ValueError", no_kv_memory(), _KV_FRAMES)
    if not plan.fits:
        est = memory.estimate_max_model_len(s.era, plan.available, plan.page_bytes, s.max_model_len)
        msg = kv_shortage(s.era, s.max_model_len, plan.needed, plan.available, est)
        return _fail(log, conn, "ValueError", msg, _KV_FRAMES)
    for i, line in enumerate(capacity_lines(s.era, plan.tokens, s.max_model_len, plan.concurrency)):
        log.info(f"kv_cache_utils.py:{1319 + 5 * i}", line)

    graph_bytes = 0
    if not s.enforce_eager:
        graph_bytes = int(m.lab_profile.get("cudagraph_bytes", 0)) or (
            CUDA_GRAPH_CAPTURE_SIZES * int(m.config["hidden_size"]) * m.num_layers * 64
        )
        sleep_real(GRAPH_CAPTURE_S, scale)
        log.info(
            "gpu_model_runner.py:4924",
            f"Graph capturing finished in {GRAPH_CAPTURE_S:.0f} secs, took {gib(graph_bytes)} GiB",
        )
    init_real = (time.monotonic() - t_init) * scale
    log.info(
        "core.py:240",
        f"init engine (profile, create kv cache, warmup model) took {init_real:.2f} seconds",
    )
    conn.send(
        (
            "ready",
            {
                "num_gpu_blocks": plan.num_blocks,
                "kv_tokens": plan.tokens,
                "gpu_used_bytes": loaded
                + plan.num_blocks * plan.page_bytes
                + graph_bytes
                + s.gpus.gpu.non_torch_mib * 2**20,
            },
        )
    )
    return _serve(s, conn)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_group(s: CoreSettings, log: VllmLog) -> None:
    """Rank 0 hosts the rendezvous store at master_addr:master_port and waits until every other
    node has joined. Without them it waits forever, as vLLM's head does."""
    srv = socket.create_server((s.master_addr, s.master_port))
    joined = 1
    log.info(
        "multiproc_executor.py:134",
        f"Waiting for {s.nnodes - 1} remote node(s) to join "
        f"the group at {s.master_addr}:{s.master_port}",
    )
    peers = []
    while joined < s.nnodes:
        conn, _ = srv.accept()
        peers.append(conn)
        joined += 1


def _serve(s: CoreSettings, conn: Connection) -> int:
    """Request loop: ("gen", rid, prompt, prompt_tokens, max_tokens) -> ("tok", rid, text)* then
    ("end", rid, finish_reason, n)."""
    per_token = SECONDS_PER_OUTPUT_TOKEN / s.time_scale
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return 0
        if msg[0] == "shutdown":
            return 0
        if msg[0] != "gen":
            continue
        _, rid, prompt, prompt_tokens, max_tokens = msg
        tokens, reason = completion(s.served_name, prompt, max_tokens)
        if prompt_tokens + len(tokens) > s.derived_max_len:
            # Positions past what RoPE was trained on: NaN logits, decoded as token 0.
            tokens, reason = garbage(max_tokens), "length"
        for tok in tokens:
            time.sleep(per_token)
            conn.send(("tok", rid, tok))
        conn.send(("end", rid, reason, len(tokens)))
