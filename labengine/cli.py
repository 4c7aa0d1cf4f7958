"""The `vllm-lab` program.

    vllm-lab serve [MODEL] [flags]   the API-server process, launched exactly like `vllm serve`
    vllm-lab smi [--json]            this node's simulated GPU and the processes holding it
    vllm-lab stray [--name N] [--mib M]   a stray GPU program (see labengine.stray)
    vllm-lab proxy [flags]           vLLM's toy disaggregated-serving proxy (labengine.proxy)
    vllm-lab xid --xid {48,79}       a GPU XID error on this node (see labengine.xidfault)

`serve` takes vLLM's flags (`--gpu_memory_utilization` as well as `--gpu-memory-utilization`)
and answers a bad one as `vllm serve` does: its usage, and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from labengine import apiserver, proxyflags, stray, xidfault
from labengine.logs import VllmLog
from labengine.tracebacks import Traceback, frames
from vllmfacts.gpu import GpuConfigError, SharedGpu, node_gpus, smi_text
from vllmfacts.serveflags import VLLM_USAGE, add_serve_arguments
from vllmfacts.wording import Era, era_of

Command = Callable[[argparse.Namespace, dict[str, str]], int]


def build_parser(era: Era) -> argparse.ArgumentParser:
    """`vllm-lab` and its subcommands. Each subcommand's parser is its namespace's `parser`
    (it reports that subcommand's errors) and `run` the function that runs it."""
    top = argparse.ArgumentParser(
        prog="vllm-lab",
        description="A GPU-less stand-in for `vllm serve`; see `vllm-lab serve --help`.",
        allow_abbrev=False,
    )
    sub = top.add_subparsers(title="commands", metavar="{serve,smi,stray,proxy,xid}", required=True)
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
    proxyp = sub.add_parser(
        "proxy", prog="vllm-lab proxy", help="a prefill/decode proxy, as vLLM's toy proxy"
    )
    proxyflags.add_arguments(proxyp)
    xidp = sub.add_parser("xid", prog="vllm-lab xid", help="a GPU XID error on this node")
    xidfault.add_arguments(xidp)
    commands: dict[str, tuple[argparse.ArgumentParser, Command]] = {
        "serve": (serve, _serve),
        "smi": (smi, _smi),
        "stray": (strayp, _stray),
        "proxy": (proxyp, _proxy),
        "xid": (xidp, _xid),
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


def _proxy(args: argparse.Namespace, env: dict[str, str]) -> int:
    from labengine import proxy  # its HTTP client and server: this command's only

    return proxy.run(args)


def _xid(args: argparse.Namespace, env: dict[str, str]) -> int:
    return xidfault.run(args.xid, env)


if __name__ == "__main__":
    raise SystemExit(main())
