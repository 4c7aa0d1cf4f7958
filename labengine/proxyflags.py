"""`vllm-lab proxy`'s flags, apart from the proxy itself: every engine process builds the
command's parser, and the proxy's HTTP client and server are imports only the proxy pays."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """toy_proxy_server.py's parse_args."""
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--host", type=str, default="127.0.0.1")
    p.add_argument("--prefiller-hosts", "--prefiller-host", type=str, nargs="+",
                   default=["localhost"])  # fmt: skip
    p.add_argument("--prefiller-ports", "--prefiller-port", type=int, nargs="+", default=[8100])
    p.add_argument("--decoder-hosts", "--decoder-host", type=str, nargs="+", default=["localhost"])
    p.add_argument("--decoder-ports", "--decoder-port", type=int, nargs="+", default=[8200])
