"""`--api-server-count` as `vllm serve` reads it (ServeSubcommand.cmd): one API server per
data-parallel rank by default, logged before the arguments; refused with --headless; and the
"non-default args" line in vLLM's parser order, with the count the launcher set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MODEL = "Qwen/Qwen2.5-14B-Instruct-AWQ"
URI = "tcp://10.100.236.130:8000"  # stops a data-parallel start at ParallelConfig, at once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(era: str, *args: str, **env: str) -> tuple[int, list[str]]:
    full = os.environ | {"GAMEDAY_VLLM_ERA": era, "GAMEDAY_TIME_SCALE": "1000", **env}
    full.pop("GAMEDAY_GPU_STATE", None)
    vllm_lab = Path(sys.executable).parent / "vllm-lab"
    done = subprocess.run(
        [str(vllm_lab), "serve", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


@pytest.mark.parametrize(
    ("era", "head", "line"), [("0.19", "", 101), ("0.33", "(MainProcess pid=", 127)]
)
def test_data_parallel_defaults_one_api_server_per_rank(era: str, head: str, line: int) -> None:
    port = _free_port()
    code, lines = _serve(era, MODEL, "--port", str(port), "-dp", "2", VLLM_PORT=URI)
    assert code == 1
    assert lines[0].startswith(head)
    assert lines[0].endswith(
        f"[serve.py:{line}] Defaulting api_server_count to data_parallel_size (2)."
    )
    assert lines[1].endswith(
        f"non-default args: {{'model_tag': '{MODEL}', 'api_server_count': 2, 'port': {port}, "
        f"'model': '{MODEL}', 'data_parallel_size': 2}}"
    )


def test_an_explicit_count_is_not_announced() -> None:
    port = _free_port()
    code, lines = _serve("0.19", MODEL, "--port", str(port), "-dp", "2", "-asc", "2", VLLM_PORT=URI)
    assert code == 1
    assert not [ln for ln in lines if "Defaulting api_server_count" in ln]
    assert lines[0].endswith(
        f"non-default args: {{'model_tag': '{MODEL}', 'api_server_count': 2, 'port': {port}, "
        f"'model': '{MODEL}', 'data_parallel_size': 2}}"
    )


def test_one_api_server_leaves_the_count_out() -> None:
    """A single API server: cmd resets the count to None before the server logs its arguments,
    and the model given as --model is listed once, with the deprecation warning before it."""
    port = _free_port()
    code, lines = _serve("0.19", "--model", MODEL, "--port", str(port), "--max-model-len", "999999")
    assert code == 1
    assert "`--model` option will be removed in v0.13" in lines[0]
    assert lines[1].endswith(
        f"non-default args: {{'port': {port}, 'model': '{MODEL}', 'max_model_len': 999999}}"
    )


@pytest.mark.parametrize(("era", "main", "serve"), [("0.19", 75, 56), ("0.33", 117, 71)])
def test_a_count_with_headless_is_refused(era: str, main: int, serve: int) -> None:
    code, lines = _serve(era, MODEL, "--headless", "--api-server-count", "1")
    assert code == 1
    assert lines[0] == "Traceback (most recent call last):"
    assert f'vllm/entrypoints/cli/main.py", line {main}, in main' in lines[4]
    assert f'vllm/entrypoints/cli/serve.py", line {serve}, in cmd' in lines[6]
    assert lines[7:] == [
        "    raise ValueError(",
        "ValueError: --api-server-count=1 cannot be used with --headless (no API servers are "
        "started in headless mode).",
    ]
