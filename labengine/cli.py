"""`vllm-lab serve MODEL [flags]`: the API-server process, launched exactly like `vllm serve`."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import time
from typing import Any

from labengine import envs
from labengine.core import API_START_S, CONFIG_RESOLVE_S, CoreSettings, sleep_real
from labengine.gpu import GpuConfigError, node_gpus
from labengine.logs import VllmLog, unprefixed_warning
from labengine.models import ModelNotFound, resolve
from labengine.wording import (
    Era,
    long_max_model_len,
    long_max_model_len_allowed,
    world_size_too_large,
)

_SERVE_FRAMES = [
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/main.py",
        73,
        "main",
        "args.dispatch_function(args)",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py",
        60,
        "cmd",
        "uvloop.run(run_server(args))",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py",
        1884,
        "run_server",
        "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
    ),
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py",
        1322,
        "create_engine_config",
        "model_config = self.create_model_config()",
    ),
]


def _max_len(text: str) -> int:
    """vLLM accepts 4096, 16k, 1M, ..."""
    t = text.strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    if t[-1:] in ("k", "m"):
        t = t[:-1]
    return int(float(t) * mult)


def build_parser(era: Era) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9 if era is Era.V0_19 else 0.92
    )
    p.add_argument("--max-model-len", type=_max_len, default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--block-size", type=int, default=16, choices=[16])
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--download-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--swap-space", type=float, default=4)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--api-key", default=None)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--disable-log-requests", action="store_true")
    p.add_argument("--enable-log-requests", action="store_true")
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "-r", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--headless", action="store_true")
    p.add_argument(
        "--distributed-executor-backend",
        default=None,
        choices=["mp", "ray", "uni", "external_launcher"],
    )
    p.add_argument("--fail-on-environ-validation", action="store_true")
    return p


def _normalise(argv: list[str]) -> list[str]:
    """vLLM accepts --gpu_memory_utilization as well as --gpu-memory-utilization."""
    out = []
    for a in argv:
        if a.startswith("--") and "_" in a.split("=", 1)[0]:
            name, *rest = a.split("=", 1)
            a = "=".join([name.replace("_", "-"), *rest])
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
    except KeyboardInterrupt as exc:
        if str(exc) != "terminated":
            raise
        # SIGTERM while starting: vLLM's traceback, and Python's exit code for an uncaught
        # KeyboardInterrupt (130; it would re-raise SIGINT, which a container's PID 1 ignores)
        VllmLog("APIServer").traceback(_TERMINATED_FRAMES, "KeyboardInterrupt: terminated")
        code = 130
    stamp = os.environ.get("GAMEDAY_EXIT_STAMP")
    if stamp:  # for the benchmark: the engine's own clock at the moment it exits
        with contextlib.suppress(OSError), open(stamp, "a") as f:
            f.write(f"{time.time():.6f} {code}\n")
    return code


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    era = Era(env.get("GAMEDAY_VLLM_ERA", "0.19"))
    scale = float(env.get("GAMEDAY_TIME_SCALE", "1"))
    if argv and argv[0] == "smi":
        return _smi(argv[1:])
    if argv and argv[0] == "stray":
        from labengine.stray import main as stray_main

        return stray_main(argv[1:])
    if not argv or argv[0] != "serve":
        sys.stderr.write(
            "usage: vllm-lab serve [model_tag] [options]\n"
            "A GPU-less stand-in for `vllm serve`; see `vllm-lab serve --help`.\n"
        )
        return 2
    parser = build_parser(era)
    args = parser.parse_args(_normalise(argv[1:]))  # exits 2 on a bad flag, as vLLM does
    defaults = vars(parser.parse_args([]))
    log = VllmLog("APIServer")
    if args.model and not args.model_tag:
        unprefixed_warning(
            "argparse_utils.py:191",
            "With `vllm serve`, you should provide the "
            "model as a positional argument or in a config file instead of via "
            "the `--model` option.",
        )
    model_tag = args.model_tag or args.model or "Qwen/Qwen3-0.6B"
    non_default = {k: v for k, v in vars(args).items() if v != defaults.get(k)}
    if args.model_tag:
        non_default["model"] = args.model_tag
    log.info("utils.py:233", f"non-default args: {non_default}")
    for name in envs.unknown_names(env):
        msg = f"Unknown vLLM environment variable detected: {name}"
        if args.fail_on_environ_validation:
            log.traceback(_SERVE_FRAMES[:2], f"ValueError: {msg}")
            return 1
        log.warning("envs.py:1744", msg)

    # vLLM binds the API socket before building the engine config (not on a headless node).
    host = args.host or "0.0.0.0"
    try:
        sock = None if args.headless else socket.create_server((host, args.port))
    except OSError as exc:
        log.traceback(_SERVE_FRAMES[:4], f"OSError: [Errno {exc.errno}] {exc.strerror}")
        return 1
    if sock is not None:
        # vLLM's setup_server: "Interrupt server on sigterm while initializing" (vllm#15997
        # shows the traceback a pod stopped during start-up leaves). Without it a server that is
        # a container's PID 1 would ignore `docker stop` until uvicorn is up.
        signal.signal(signal.SIGTERM, _terminated)

    sleep_real(CONFIG_RESOLVE_S, scale)
    try:
        gpus = node_gpus(env)
        model = resolve(model_tag, args.download_dir)
    except (ModelNotFound, GpuConfigError) as exc:
        log.traceback(_SERVE_FRAMES, f"ValueError: {exc}")
        return 1
    log.info("model.py:547", f"Resolved architecture: {model.architecture}")
    key, derived = model.derived_max_len()
    max_len = args.max_model_len if args.max_model_len is not None else int(derived)
    if max_len > derived:
        if envs.truthy(env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
            log.warning("model.py:1755", long_max_model_len_allowed(max_len, key, derived))
        else:
            _validation_error(
                log,
                "ModelConfig",
                long_max_model_len(max_len, key, derived),
                f"ArgsKwargs((), {{'model': '{model_tag}', ...}})",
            )
            return 1
    log.info("model.py:1510", f"Using max model len {max_len}")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    available = len(gpus.visible) * (
        args.nnodes if args.distributed_executor_backend != "ray" else 1
    )
    if world > available and args.distributed_executor_backend != "ray":
        _validation_error(
            log,
            "ParallelConfig",
            world_size_too_large(world, len(gpus.visible)),
            f"ArgsKwargs((), {{'tensor_parallel_size': {args.tensor_parallel_size}, ...}})",
        )
        return 1
    if len(gpus.visible) == 0:
        log.traceback(_SERVE_FRAMES, "RuntimeError: No CUDA GPUs are available")
        return 1

    large = gpus.gpu.large
    batched = args.max_num_batched_tokens or (8192 if large else 2048)
    log.info(
        "scheduler.py:245", f"Chunked prefill is enabled with max_num_batched_tokens={batched}."
    )
    served = (args.served_model_name or [model_tag])[0]
    settings = CoreSettings(
        era=era,
        model=model,
        served_name=served,
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
    )
    if args.headless:
        from labengine import core

        def _on_signal(signum: int, frame: object) -> None:
            # vLLM's run_headless: a signal ends the node with SystemExit (exit 0). Without a
            # handler a headless node that is a container's PID 1 would ignore `docker stop`.
            raise SystemExit

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)

        try:
            log.info(
                "api_server.py:120",
                f"Launching vLLM (v{era.version}) headless multiproc executor, with head node "
                f"address tcp://{args.master_addr}:{args.master_port} for torch.distributed "
                "process group.",
            )
            _set_comm(settings.process_name)
            return core.run_worker(settings, log)
        finally:
            log.info("api_server.py:153", "Shutting down.")
    assert sock is not None
    return _run_engine(settings, log, sock, host, args.port)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("terminated")


_TERMINATED_FRAMES = [
    *_SERVE_FRAMES[:3],
    (
        "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py",
        1901,
        "signal_handler",
        'raise KeyboardInterrupt("terminated")',
    ),
]


def _validation_error(log: VllmLog, cls: str, message: str, input_value: str) -> None:
    lines = message.splitlines()
    body = "\n".join([f"  Value error, {lines[0]}", *lines[1:]])
    log.traceback(
        _SERVE_FRAMES,
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {cls}\n{body} "
        f"[type=value_error, input_value={input_value}, input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error",
    )


def _run_engine(s: CoreSettings, log: VllmLog, sock: socket.socket, host: str, port: int) -> int:
    from labengine import core

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
    except KeyboardInterrupt:  # SIGTERM while the engine starts (see main)
        proc.kill()
        raise
    if msg[0] != "ready":
        proc.join(timeout=5)
        code = proc.exitcode if proc.exitcode is not None else 1
        log.traceback(
            [
                *_SERVE_FRAMES[:4],
                (
                    "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py",
                    1084,
                    "wait_for_engine_startup",
                    "raise RuntimeError(",
                ),
            ],
            "RuntimeError: Engine core initialization failed. See root cause above. "
            f"Failed core proc(s): {{'EngineCore_DP0': {code}}}",
        )
        return 1
    info = msg[1]
    from labengine.server import ServerState, serve

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # from here uvicorn shuts down gracefully

    sleep_real(API_START_S, s.time_scale)
    log.info("api_server.py:1850", "Supported_tasks: ['generate']")
    log.info("launcher.py:37", f"Starting vLLM API server 0 on http://{host}:{port}")
    for route, methods in (
        ("/health", "GET"),
        ("/metrics", "GET"),
        ("/v1/models", "GET"),
        ("/version", "GET"),
        ("/v1/chat/completions", "POST"),
        ("/v1/completions", "POST"),
    ):
        log.info("launcher.py:45", f"Route: {route}, Methods: {methods}")
    st = ServerState(
        era=s.era,
        served_name=s.served_name,
        model_root=s.model.tag,
        max_model_len=s.max_model_len,
        kv_tokens=info["kv_tokens"],
        conn=parent,
        log=log,
        keep_alive_on_death=envs.truthy(s.env, "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH"),
        stats_interval_s=10.0 / s.time_scale,
    )
    try:
        serve(st, sock, host, port)
    finally:
        if proc.is_alive():
            with contextlib.suppress(OSError):
                parent.send(("shutdown",))
            proc.join(timeout=2)
            if proc.is_alive():
                proc.kill()
    return 0


def _set_comm(name: str) -> None:
    """The process name `ps` shows (15 characters at most, as the kernel keeps it)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:
        f.write(name[:15])


def _smi(argv: list[str]) -> int:
    """`vllm-lab smi [--json]`: this node's simulated GPU and the processes holding its memory."""
    import json as _json

    from labengine.gpu import SharedGpu

    try:
        gpus = node_gpus()
    except GpuConfigError as exc:
        sys.stderr.write(f"vllm-lab smi: {exc}\n")
        return 2
    shared = SharedGpu.from_env(gpus.gpu)
    if shared is None:
        sys.stderr.write("vllm-lab smi: GAMEDAY_GPU_STATE is not set (no shared GPU here)\n")
        return 2
    if "--json" in argv:
        procs = [{"pid": p.pid, "name": p.name, "mib": p.mib} for p in shared.processes()]
        sys.stdout.write(
            _json.dumps(
                {
                    "gpu": gpus.gpu.name,
                    "memory_mib": gpus.gpu.memory_mib,
                    "used_mib": sum(p["mib"] for p in procs),
                    "processes": procs,
                }
            )
            + "\n"
        )
    else:
        from labengine.gpu import smi_text

        sys.stdout.write(smi_text(shared))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
