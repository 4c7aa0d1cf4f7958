"""`vllm serve`'s command line as vLLM parses it: the flags the stand-in reads or accepts, with
vLLM's defaults and in its parser's order, and `vllm`'s top-level usage per release. The
stand-in parses with it, and `gameday validate` checks a scenario's flags against it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from vllmfacts.wording import Era

if TYPE_CHECKING:
    from vllmfacts.kvconfig import KVTransferConfig


def _kv_transfer_config(val: str) -> KVTransferConfig:
    """--kv-transfer-config's `type`: pydantic is imported only when the flag is given."""
    from vllmfacts.kvconfig import parse_kv_transfer_config

    return parse_kv_transfer_config(val)


def _max_len(text: str) -> int:
    """vLLM accepts 4096, 16k, 1M, ..."""
    t = text.strip().lower()
    mult = {"k": 1000, "m": 1000_000}.get(t[-1:], 1)
    if t[-1:] in ("k", "m"):
        t = t[:-1]
    return int(float(t) * mult)


# config/lora.py's MaxLoRARanks (0.19.1 :24, 0.33.0 :27)
MAX_LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512]


class LoRAModulePath(NamedTuple):
    """One --lora-modules entry (LoRAModulePath)."""

    name: str
    path: str
    base_model_name: str | None = None


class _LoRAModules(argparse.Action):
    """vLLM's LoRAParserAction: `name=path` when the item has `=` and no comma, else JSON."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        modules: list[LoRAModulePath] = []
        for item in values or []:
            if not item:
                continue
            if "=" in item and "," not in item:
                parts = item.split("=")
                if len(parts) != 2:
                    # `name, path = item.split("=")` unpacks too many values
                    raise ValueError(f"too many values to unpack (expected 2, got {len(parts)})")
                modules.append(LoRAModulePath(parts[0], parts[1]))
                continue
            try:
                raw = json.loads(item)
            except json.JSONDecodeError:
                parser.error(f"Invalid JSON format for --lora-modules: {item}")
            try:
                modules.append(LoRAModulePath(**raw))
            except TypeError as e:
                parser.error(f"Invalid fields for --lora-modules: {item} - {e}")
        setattr(namespace, self.dest, modules)


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
    # FrontendArgs: adapters loaded at start-up, `name=path` or a JSON object each
    # (entrypoints/openai/cli_args.py, LoRAParserAction)
    p.add_argument("--lora-modules", nargs="+", action=_LoRAModules, default=None)
    # FrontendArgs: a Jinja template, or a file holding one, that replaces the tokenizer's
    p.add_argument("--chat-template", default=None)
    p.add_argument(
        "--chat-template-content-format", default="auto", choices=["auto", "openai", "string"]
    )
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
    # LoRAConfig (config/lora.py): the rank is a Literal, so argparse offers its values as choices
    p.add_argument("--enable-lora", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--max-loras", type=int, default=1)
    p.add_argument("--max-lora-rank", type=int, default=16, choices=MAX_LORA_RANKS)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    # VllmConfig's group: a KVTransferConfig given as JSON, validated by pydantic as vLLM does
    # (engine/arg_utils.py parse_dataclass; vllmfacts.kvconfig)
    p.add_argument("--kv-transfer-config", type=_kv_transfer_config, default=None)
    p.add_argument("--fail-on-environ-validation", action="store_true")
    p.add_argument("--enable-log-requests", action="store_true")
