"""`vllm serve`'s API-server process: its start-up checks, then the engine core and uvicorn.

The steps run in vLLM's order: the unknown-variable check, binding the API socket (before the
engine config, and not on a headless node), config resolution (model, context window, parallel
size, GPUs), then either the headless worker or the forked engine core and the HTTP server.
A failed step logs vLLM's lines and traceback and the process exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import socket
from multiprocessing.connection import Connection
from multiprocessing.context import ForkProcess
from typing import Any

from labengine import clock, core, loading, mamba
from labengine.core import API_START_S, CONFIG_RESOLVE_S, CoreSettings, sleep_real
from labengine.logs import VllmLog
from labengine.sites import Site, where
from labengine.tracebacks import Traceback, frames
from vllmfacts import arch, envs
from vllmfacts.gpu import GpuConfigError, NodeGpus, node_gpus
from vllmfacts.models import DtypeError, ModelInfo, ModelNotFound, cast_line, resolve, resolve_dtype
from vllmfacts.wording import (
    Era,
    engine_init_failed,
    era_of,
    headless_launch,
    long_max_model_len,
    long_max_model_len_allowed,
    tp_heads_indivisible,
    world_size_too_large,
)

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"


class _Failed(Exception):
    """A start-up step failed; vLLM's lines are logged. The process exits 1."""


def serve(args: argparse.Namespace, defaults: dict[str, Any], env: dict[str, str]) -> int:
    """Run `vllm serve` with parsed `args` (`defaults`: the parser's). Exit code."""
    era = era_of(env)
    scale = float(env.get("GAMEDAY_TIME_SCALE", "1"))
    # with more than one API server `vllm serve`'s own process only checks the configuration
    # and launches them (run_multi_api_server), and a headless node's launches its workers
    # (run_headless): neither decorates its logs, as the API server does
    servers = api_server_count(args)
    multi = servers > 1
    launcher = servers != 1
    log = VllmLog("MainProcess" if launcher else "APIServer", era=era, decorated=not launcher)
    _model_flag_warning(args, era, log)
    if args.headless and args.api_server_count is not None and args.api_server_count > 0:
        # raised by ServeSubcommand.cmd before anything is logged: Python's own traceback
        log.traceback(
            frames(era, Traceback.SERVE_HEADLESS_API_SERVERS),
            f"ValueError: --api-server-count={args.api_server_count} cannot be used with "
            "--headless (no API servers are started in headless mode).",
        )
        return 1
    if args.api_server_count is None and multi:
        log.info(
            where(era, Site.API_SERVER_COUNT),
            f"Defaulting api_server_count to data_parallel_size ({servers}).",
        )
    # ServeSubcommand.cmd: the positional model wins, and the API server count is set before
    # the launcher logs the arguments that differ from the defaults (a headless node logs none)
    model_tag: str = args.model_tag or args.model or DEFAULT_MODEL
    args.model = model_tag
    args.api_server_count = servers if servers != 1 else None
    if not args.headless:
        defaults = {**defaults, "model": DEFAULT_MODEL}  # EngineArgs.model's default
        non_default = {k: getattr(args, k) for k, v in defaults.items() if getattr(args, k) != v}
        log.info(where(era, Site.NON_DEFAULT_ARGS), f"non-default args: {non_default}")
    host = args.host or "0.0.0.0"
    try:
        _check_environ(args, env, era, log)
        sock = None if args.headless else _bind(host, args.port, era, log)
        sleep_real(CONFIG_RESOLVE_S, scale)
        settings = _settings(args, env, era, scale, model_tag, log)
    except _Failed:
        return 1
    if multi:  # the first API server's lines from here on (the lab runs one)
        log.rebind("ApiServer_0")
    if args.headless:
        return _run_headless(settings, log)
    assert sock is not None
    return _run_engine(settings, log, sock, host, args.port)


def api_server_count(args: argparse.Namespace) -> int:
    """How many API servers `vllm serve` starts (ServeSubcommand.cmd): none when headless, else
    --api-server-count, by default one per data-parallel rank (the lab engine has no external
    or hybrid load balancing, whose default is one)."""
    if getattr(args, "headless", False):
        return 0
    count = getattr(args, "api_server_count", None)
    return int(args.data_parallel_size if count is None else count)


def _model_flag_warning(args: argparse.Namespace, era: Era, log: VllmLog) -> None:
    if args.model and not args.model_tag:
        # logged while the arguments are parsed, before the process decorates its logs
        removal = "in v0.13" if era is Era.V0_19 else "in a future version"
        VllmLog("MainProcess", log.stream, era, decorated=False).warning(
            where(era, Site.ARGPARSE_MODEL_FLAG),
            "With `vllm serve`, you should provide the model as a positional argument or in a "
            f"config file instead of via the `--model` option. The `--model` option will be "
            f"removed {removal}.",
        )


def _check_environ(args: argparse.Namespace, env: dict[str, str], era: Era, log: VllmLog) -> None:
    for name in envs.unknown_names(era, env):
        msg = f"Unknown vLLM environment variable detected: {name}"
        if args.fail_on_environ_validation:
            log.traceback(frames(era, Traceback.SERVE_ENVIRON), f"ValueError: {msg}")
            raise _Failed
        log.warning(where(era, Site.UNKNOWN_ENV), msg)


def _bind(host: str, port: int, era: Era, log: VllmLog) -> socket.socket:
    try:
        sock = socket.create_server((host, port))
    except OSError as exc:
        # socket.create_server words its error "... (while attempting to bind on address
        # ...)"; vLLM binds with sock.bind(), whose error is the plain strerror
        log.traceback(
            frames(era, Traceback.SERVE_BIND),
            f"OSError: [Errno {exc.errno}] {os.strerror(exc.errno or 0)}",
        )
        raise _Failed from exc
    # vLLM's setup_server: "Interrupt server on sigterm while initializing" (vllm#15997 shows the
    # traceback a pod stopped during start-up leaves). Without it a server that is a container's
    # PID 1 would ignore `docker stop` until uvicorn is up.
    signal.signal(signal.SIGTERM, _terminated)
    return sock


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("terminated")


def _settings(
    args: argparse.Namespace,
    env: dict[str, str],
    era: Era,
    scale: float,
    model_tag: str,
    log: VllmLog,
) -> CoreSettings:
    """Config resolution: the model, its context window, the parallel size against the GPUs."""
    try:
        gpus = node_gpus(env)
        model = resolve(model_tag, args.download_dir)
        mamba.build_bugs(env)
        loading.storage_gib_s(env)
        clock.start_of(env)
    except (
        ModelNotFound,
        GpuConfigError,
        mamba.BuildError,
        loading.StorageError,
        clock.ClockError,
    ) as exc:
        log.traceback(frames(era, Traceback.SERVE_CONFIG), f"ValueError: {exc}")
        raise _Failed from exc
    log.info(where(era, Site.RESOLVED_ARCHITECTURE), f"Resolved architecture: {model.architecture}")
    dtype = _dtype(args, model, model_tag, era, log)
    max_len, derived = _max_model_len(args, env, model, model_tag, era, log)
    _check_dp_port(args, env, era, log)
    _check_world(args, gpus, era, log)
    _check_heads(args, model, era, log)
    large = gpus.gpu.large
    batched = args.max_num_batched_tokens or (8192 if large else 2048)
    log.info(
        where(era, Site.CHUNKED_PREFILL),
        f"Chunked prefill is enabled with max_num_batched_tokens={batched}.",
    )
    return CoreSettings(
        era=era,
        model=model,
        served_name=(args.served_model_name or [model_tag])[0],
        gpus=gpus,
        utilization=args.gpu_memory_utilization,
        max_model_len=max_len,
        derived_max_len=derived,
        tp=args.tensor_parallel_size,
        pp=args.pipeline_parallel_size,
        max_num_seqs=args.max_num_seqs or (1024 if large else 256),
        max_num_batched_tokens=batched,
        enforce_eager=args.enforce_eager,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        time_scale=scale,
        env=env,
        dtype=dtype,
        kv_cache_dtype=args.kv_cache_dtype,
        max_logprobs=args.max_logprobs,
        prefix_caching=args.enable_prefix_caching is not False,
        # init_app_state's load_chat_template(args.chat_template): a file's text or the value
        # itself; the renderer falls back to the tokenizer's template
        chat_template=args.chat_template is not None or model.has_chat_template,
        chat_content_format=args.chat_template_content_format,
        max_lora_rank=args.max_lora_rank if args.enable_lora else None,
        lora_modules=tuple((m.name, m.path) for m in args.lora_modules or ()),
        kv_transfer=args.kv_transfer_config,
    )


def _dtype(
    args: argparse.Namespace, model: ModelInfo, model_tag: str, era: Era, log: VllmLog
) -> str:
    """--dtype as ModelConfig resolves it; a refusal is its validation error."""
    try:
        arch.check_supported(model.config)
        dtype = resolve_dtype(model.model_type, model.config_dtype, args.dtype)
    except (DtypeError, arch.UnsupportedArchitecture) as exc:
        _validation_error(
            log,
            era,
            "ModelConfig",
            str(exc),
            f"ArgsKwargs((), {{'model': '{model_tag}', ...}})",
            args,
        )
        raise _Failed from exc
    cast = cast_line(model.config_dtype, dtype)
    if cast is not None:
        level, line = cast
        site = {"info": Site.DOWNCASTING if line.startswith("Downcasting") else Site.UPCASTING}
        getattr(log, level)(where(era, site.get(level, Site.CASTING)), line)
    return dtype


def _max_model_len(
    args: argparse.Namespace,
    env: dict[str, str],
    model: ModelInfo,
    model_tag: str,
    era: Era,
    log: VllmLog,
) -> tuple[int, float]:
    """The context window served and the model's own (derived) one."""
    key, derived = model.derived_max_len()
    model_max_length = model.config.get("model_max_length")
    max_len: int = args.max_model_len if args.max_model_len is not None else int(derived)
    if max_len > derived:
        if not envs.truthy(env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
            _validation_error(
                log,
                era,
                "ModelConfig",
                long_max_model_len(max_len, key, derived, model_max_length),
                f"ArgsKwargs((), {{'model': '{model_tag}', ...}})",
                args,
            )
            raise _Failed
        log.warning(
            where(era, Site.LONG_MAX_MODEL_LEN),
            long_max_model_len_allowed(max_len, key, derived, model_max_length),
        )
    log.info(where(era, Site.MAX_MODEL_LEN), f"Using max model len {max_len}")
    return max_len, derived


def _check_dp_port(args: argparse.Namespace, env: dict[str, str], era: Era, log: VllmLog) -> None:
    """ParallelConfig takes the data-parallel master's ports (get_open_ports_list, which reads
    VLLM_PORT) before its world-size check, when data parallelism is asked for."""
    if args.data_parallel_size <= 1:
        return
    try:
        envs.vllm_port(era, env)
    except envs.EnvError as exc:
        _validation_error(
            log,
            era,
            "ParallelConfig",
            str(exc),
            f"ArgsKwargs((), {{'data_parallel_size': {args.data_parallel_size}, ...}})",
            args,
        )
        raise _Failed from exc


def _check_world(args: argparse.Namespace, gpus: NodeGpus, era: Era, log: VllmLog) -> None:
    """ParallelConfig picks a backend only when none is given: on one node ("mp" is the default
    with --nnodes > 1), a world larger than this node's GPUs is refused."""
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    picks_backend = args.distributed_executor_backend is None and args.nnodes == 1
    if picks_backend and world * args.data_parallel_size > 1 and world > len(gpus.visible):
        _validation_error(
            log,
            era,
            "ParallelConfig",
            world_size_too_large(world, len(gpus.visible)),
            f"ArgsKwargs((), {{'tensor_parallel_size': {args.tensor_parallel_size}, ...}})",
            args,
        )
        raise _Failed
    if len(gpus.visible) == 0:
        log.traceback(
            frames(era, Traceback.SERVE_CONFIG), "RuntimeError: No CUDA GPUs are available"
        )
        raise _Failed


def _check_heads(args: argparse.Namespace, model: ModelInfo, era: Era, log: VllmLog) -> None:
    """VllmConfig's validation: the attention heads split evenly across the TP ranks."""
    heads = int(model.config["num_attention_heads"])
    tp: int = args.tensor_parallel_size
    if heads % tp:
        _validation_error(
            log,
            era,
            "VllmConfig",
            tp_heads_indivisible(heads, tp),
            "ArgsKwargs((), {'model_config': ModelConfig(...), ...})",
            args,
        )
        raise _Failed


# where a config class's validation error is raised: by how many API servers `vllm serve`
# starts (0: headless, 2: several) and the config class that refuses
_CONFIG_TRACEBACKS = {
    (0, "ModelConfig"): Traceback.SERVE_HEADLESS_CONFIG,
    (0, "ParallelConfig"): Traceback.SERVE_HEADLESS_CONFIG_PARALLEL,
    (0, "VllmConfig"): Traceback.SERVE_HEADLESS_CONFIG_VLLM,
    (1, "ModelConfig"): Traceback.SERVE_CONFIG,
    (1, "ParallelConfig"): Traceback.SERVE_CONFIG_PARALLEL,
    (1, "VllmConfig"): Traceback.SERVE_CONFIG_VLLM,
    (2, "ModelConfig"): Traceback.SERVE_MULTI_CONFIG,
    (2, "ParallelConfig"): Traceback.SERVE_MULTI_CONFIG_PARALLEL,
    (2, "VllmConfig"): Traceback.SERVE_MULTI_CONFIG_VLLM,
}


def _validation_error(
    log: VllmLog,
    era: Era,
    cls: str,
    message: str,
    input_value: str,
    args: argparse.Namespace,
) -> None:
    """pydantic's error for one config class, after the traceback of the place vLLM builds it
    (with several API servers their launcher builds it, run_multi_api_server; on a headless
    node run_headless)."""
    lines = message.splitlines()
    body = "\n".join([f"  Value error, {lines[0]}", *lines[1:]])
    servers = min(api_server_count(args), 2)
    log.traceback(
        frames(era, _CONFIG_TRACEBACKS[(servers, cls)]),
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {cls}\n{body} "
        f"[type=value_error, input_value={input_value}, input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error",
    )


def _run_headless(s: CoreSettings, log: VllmLog) -> int:
    def _on_signal(signum: int, frame: object) -> None:
        # vLLM's run_headless: a signal ends the node with SystemExit (exit 0). Without a
        # handler a headless node that is a container's PID 1 would ignore `docker stop`.
        raise SystemExit

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    log.info(
        where(s.era, Site.HEADLESS_LAUNCH),
        headless_launch(s.era, s.master_addr, s.master_port),
    )
    # the worker's name before the process's: once `ps` shows it, its lines carry it too. The
    # multi-node path of run_headless returns from the executor's worker monitor without a
    # "Shutting down." (that line ends its data-parallel path only)
    # run_headless's worker monitor speaks as the launcher, once its worker has died
    launcher = VllmLog(log.process_name, log.stream, log.era, decorated=log.decorated)
    log.rebind(core.worker_name(s))
    _set_comm(s.process_name)
    return core.run_worker(s, log, launcher)


def _run_engine(s: CoreSettings, log: VllmLog, sock: socket.socket, host: str, port: int) -> int:
    try:
        proc, conn, ready = _start_core(s, log, sock)
    except _Failed:
        return 1
    # imported once the engine core is forked: that process needs none of the HTTP stack
    from labengine.server import ServerState, serve
    from labengine.server.cache_info import CacheState, cache_config_info
    from labengine.server.routes import DEV_MODE_WARNING, DEV_ROUTES, ROUTES

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # from here uvicorn shuts down gracefully
    sleep_real(API_START_S, s.time_scale)
    log.info(where(s.era, Site.SUPPORTED_TASKS), "Supported tasks: ['generate']")
    failure = _init_static_loras(s, conn)
    if failure is not None:
        _stop_core(proc, conn)
        # 0.19's load_lora_adapter re-raises the client's Exception; 0.33's returns an error
        # response, which init_static_loras raises as a ValueError
        kind = "Exception" if s.era is Era.V0_19 else "ValueError"
        log.traceback(frames(s.era, Traceback.SERVE_STATIC_LORAS), f"{kind}: {failure}")
        return 1
    if s.chat_content_format == "auto":
        # init_app_state warms the chat renderer up, which detects the template's content
        # format; the stand-in's templates (and a missing one) render content as a string
        log.info(
            where(s.era, Site.CHAT_CONTENT_FORMAT),
            "Detected the chat template content format to be 'string'. "
            "You can set `--chat-template-content-format` to override this.",
        )
    log.info(
        where(s.era, Site.SERVER_START),
        f"Starting vLLM server on http://{host}:{port}",
    )
    log.info(where(s.era, Site.ROUTES_HEAD), "Available routes are:")
    dev_mode = envs.truthy(s.env, "VLLM_SERVER_DEV_MODE")
    if dev_mode:
        log.warning(where(s.era, Site.DEV_MODE), DEV_MODE_WARNING)
    for route, method in ROUTES + (DEV_ROUTES if dev_mode else ()):
        log.info(where(s.era, Site.ROUTE), f"Route: {route}, Methods: {method}")
    st = ServerState(
        era=s.era,
        served_name=s.served_name,
        model_root=s.model.tag,
        max_model_len=s.max_model_len,
        kv_tokens=int(ready["kv_tokens"]),
        conn=conn,
        log=log,
        keep_alive_on_death=envs.truthy(s.env, "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH"),
        stats_interval_s=10.0 / s.time_scale,
        time_scale=s.time_scale,
        dev_mode=dev_mode,
        max_num_seqs=s.max_num_seqs,
        max_logprobs=s.max_logprobs,
        vocab_size=int(s.model.config["vocab_size"]),
        chat_template=s.chat_template,
        cache_info=cache_config_info(
            s.era,
            CacheState(
                utilization=s.utilization,
                cache_dtype=s.kv_cache_dtype,
                prefix_caching=s.prefix_caching,
                num_gpu_blocks=int(ready["num_gpu_blocks"]),
                kv_tokens=int(ready["kv_tokens"]),
                concurrency=float(ready["concurrency"]),
            ),
        ),
    )
    try:
        serve(st, sock, host, port)
    finally:
        _stop_core(proc, conn)
    return 0


def _init_static_loras(s: CoreSettings, conn: Connection) -> str | None:
    """init_app_state's init_static_loras: each --lora-modules adapter through the engine core's
    add_lora utility call, in order; the first failure's message, None when all load."""
    for name, path in s.lora_modules:
        conn.send(("add_lora", name, path))
        reply = conn.recv()
        if reply[1] is not None:
            return str(reply[1])
    return None


def _start_core(
    s: CoreSettings, log: VllmLog, sock: socket.socket
) -> tuple[ForkProcess, Connection, dict[str, Any]]:
    """Fork the engine core and wait for its start-up. The process, the pipe to it, and what
    the engine core reported of its KV cache (blocks, tokens, concurrency)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    core_name = s.era.engine_core_name

    def core_main() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sock.close()
        parent.close()
        log.rebind(core_name)
        _set_comm(s.process_name)
        os._exit(core.run(s, child, log))

    proc = ctx.Process(target=core_main, name=core_name, daemon=True)
    proc.start()
    child.close()
    try:
        msg: Any = parent.recv()
    except EOFError:
        msg = ("failed",)
    except KeyboardInterrupt:  # SIGTERM while the engine starts (see cli.main)
        proc.kill()
        raise
    if msg[0] != "ready":
        proc.join(timeout=5)
        code = proc.exitcode if proc.exitcode is not None else 1
        log.traceback(
            frames(s.era, Traceback.SERVE_ENGINE_STARTUP),
            f"RuntimeError: {engine_init_failed(s.era, code)}",
        )
        raise _Failed
    ready: dict[str, Any] = msg[1]
    return proc, parent, ready


def _stop_core(proc: ForkProcess, conn: Connection) -> None:
    if proc.is_alive():
        with contextlib.suppress(OSError):
            conn.send(("shutdown",))
        proc.join(timeout=2)
        if proc.is_alive():
            proc.kill()


def _set_comm(name: str) -> None:
    """The process name `ps` shows (15 characters at most, as the kernel keeps it)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(name[:15])
