"""The `vllm-lab` program.

    vllm-lab serve [MODEL] [flags]   the API-server process, launched exactly like `vllm serve`
    vllm-lab smi [--json]            this node's simulated GPU and the processes holding it
    vllm-lab stray [--name N] [--mib M]   a stray GPU program (see labengine.stray)

`serve` takes vLLM's flags (`--gpu_memory_utilization` as well as `--gpu-memory-utilization`)
and answers a bad one as `vllm serve` does: its usage, and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from labengine import apiserver, stray
from labengine.gpu import GpuConfigError, SharedGpu, node_gpus, smi_text
from labengine.logs import VllmLog
from labengine.tracebacks import Traceback, frames
from labengine.wording import Era, era_of

Command = Callable[[argparse.Namespace, dict[str, str]], int]


def _max_len(text: str) -> int:
    """vLLM accepts 4096, 16k, 1M, ..."""
    t = text.strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    if t[-1:] in ("k", "m"):
        t = t[:-1]
    return int(float(t) * mult)


# `vllm`'s top-level usage, as each release prints it (its subcommands differ)
VLLM_USAGE = {
    Era.V0_19: "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,run-batch} ...\n",
    Era.V0_33: "usage: vllm [-h] [-v]\n"
    "            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,"
    "snapshot}\n            ...\n",
}


def add_serve_arguments(p: argparse.ArgumentParser, era: Era) -> None:
    """`vllm serve`'s flags that the stand-in reads or accepts, with vLLM's defaults, in the
    order vLLM's parser adds them (make_arg_parser: its own, FrontendArgs, then EngineArgs by
    config group), which is the order of its "non-default args" line."""
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--headless", action="store_true")
    # None: one API server per data-parallel rank (vLLM's internal load balancing)
    p.add_argument("--api-server-count", "-asc", type=int, default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--api-key", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-model-len", type=_max_len, default=None)
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument(
        "--max-logprobs",
        type=int,
        default=20,
        help="most logprobs a request may ask for (vLLM's default 20; -1: the whole vocabulary)",
    )
    p.add_argument("--served-model-name", nargs="+", default=None)
    # GPU memory lent out between rollouts (POST /sleep, /wake_up: VLLM_SERVER_DEV_MODE=1)
    p.add_argument("--enable-sleep-mode", action="store_true")
    p.add_argument("--download-dir", default=None)
    p.add_argument(
        "--distributed-executor-backend",
        default=None,
        choices=["mp", "ray", "uni", "external_launcher"],
    )
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "-r", type=int, default=0)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--block-size", type=int, default=16, choices=[16])
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9 if era is Era.V0_19 else 0.92
    )
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--fail-on-environ-validation", action="store_true")
    p.add_argument("--enable-log-requests", action="store_true")


def build_parser(era: Era) -> argparse.ArgumentParser:
    """`vllm-lab` and its subcommands. Each subcommand's parser is its namespace's `parser`
    (it reports that subcommand's errors) and `run` the function that runs it."""
    top = argparse.ArgumentParser(
        prog="vllm-lab",
        description="A GPU-less stand-in for `vllm serve`; see `vllm-lab serve --help`.",
        allow_abbrev=False,
    )
    sub = top.add_subparsers(title="commands", metavar="{serve,smi,stray}", required=True)
    serve = sub.add_parser(
        "serve",
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",  # vLLM's ServeSubcommand.subparser_init
        allow_abbrev=False,
        help="serve a model as `vllm serve` does",
    )
    add_serve_arguments(serve, era)
    smi = sub.add_parser(
        "smi", prog="vllm-lab smi", help="this node's GPU and the processes holding its memory"
    )
    smi.add_argument("--json", action="store_true", help="one JSON object, for programs")
    strayp = sub.add_parser("stray", prog="vllm-lab stray", help="a stray GPU program")
    stray.add_arguments(strayp)
    commands: dict[str, tuple[argparse.ArgumentParser, Command]] = {
        "serve": (serve, _serve),
        "smi": (smi, _smi),
        "stray": (strayp, _stray),
    }
    for p, run in commands.values():
        p.set_defaults(parser=p, run=run)
    return top


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
    env = dict(os.environ)
    era = era_of(env)
    args, extra = build_parser(era).parse_known_args(
        _normalise(list(sys.argv[1:] if argv is None else argv))
    )
    if extra and args.run is _serve:
        # vLLM parses known arguments per subcommand and leaves the leftovers to its top-level
        # parser, whose usage and name head the error
        sys.stderr.write(
            VLLM_USAGE[era] + f"vllm: error: unrecognized arguments: {' '.join(extra)}\n"
        )
        return 2
    if extra:
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    run: Command = args.run
    try:
        return run(args, env)
    except KeyboardInterrupt as exc:
        if str(exc) != "terminated":
            raise
        # SIGTERM while starting: vLLM's traceback, and Python's exit code for an uncaught
        # KeyboardInterrupt (130; it would re-raise SIGINT, which a container's PID 1 ignores)
        VllmLog("APIServer", era=era_of(env)).traceback(
            frames(era_of(env), Traceback.SERVE_TERMINATED), "KeyboardInterrupt: terminated"
        )
        return 130


def _serve(args: argparse.Namespace, env: dict[str, str]) -> int:
    parser: argparse.ArgumentParser = args.parser
    return apiserver.serve(args, vars(parser.parse_args([])), env)


def _smi(args: argparse.Namespace, env: dict[str, str]) -> int:
    """This node's simulated GPU and the processes holding its memory."""
    try:
        gpus = node_gpus(env)
    except GpuConfigError as exc:
        sys.stderr.write(f"vllm-lab smi: {exc}\n")
        return 2
    shared = SharedGpu.from_env(gpus.gpu, env)
    if shared is None:
        sys.stderr.write("vllm-lab smi: GAMEDAY_GPU_STATE is not set (no shared GPU here)\n")
        return 2
    if not args.json:
        sys.stdout.write(smi_text(shared))
        return 0
    held = shared.processes()
    doc = {
        "gpu": gpus.gpu.name,
        "memory_mib": gpus.gpu.memory_mib,
        "used_mib": sum(p.mib for p in held),
        "processes": [{"pid": p.pid, "name": p.name, "mib": p.mib} for p in held],
    }
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


def _stray(args: argparse.Namespace, env: dict[str, str]) -> int:
    return stray.run(args.name, args.mib, env)


if __name__ == "__main__":
    raise SystemExit(main())
