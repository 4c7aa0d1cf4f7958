"""LoRA adapters given at start-up (--enable-lora --lora-modules): the rank check of the engine
core's add_lora call, after the whole engine start, and --max-lora-rank's choices."""

from __future__ import annotations

import os
import subprocess
import sys

from labengine.logs import traceback_lines
from labengine.tracebacks import Traceback, frames
from tests.integration.labengine.test_engine import (
    QWEN,
    free_port,
    logged,
    serve,
    serve_traceback,
)
from vllmfacts.wording import Era

R64 = "sql=gameday-lab/qwen2.5-14b-sql-lora-r64"  # its adapter_config.json: r 64
RANK = "LoRA rank 64 is greater than max_lora_rank 16."


def lora_serve(*args: str, era: str = "0.19") -> tuple[int, list[str]]:
    p = serve(
        QWEN, "--enable-lora", "--lora-modules", R64, *args,
        "--host", "127.0.0.1", "--port", str(free_port()), "--master-port", str(free_port()),
        env={"GAMEDAY_VLLM_ERA": era}, timeout=60,
    )  # fmt: skip
    return p.returncode, logged(p.stdout)


def test_a_rank_above_the_max_fails_once_the_engine_is_up() -> None:
    code, lines = lora_serve()
    assert code == 1
    tasks = lines.index("(APIServer) INFO [api_server.py:592] Supported tasks: ['generate']")
    core = lines.index("(EngineCore) ERROR [core.py:1308] Invocation of add_lora method failed")
    assert any("GPU KV cache size" in ln for ln in lines[:tasks])  # the engine started in full
    assert tasks < core
    # logger.exception: the record's head on every line of the worker's traceback
    tb = traceback_lines(frames(Era.V0_19, Traceback.CORE_ADD_LORA), f"ValueError: {RANK}")
    assert lines[core + 1 : core + 1 + len(tb)] == [
        f"(EngineCore) ERROR [core.py:1308] {ln}" for ln in tb
    ]
    expected = serve_traceback(
        Traceback.SERVE_STATIC_LORAS, f"Exception: Call to add_lora method failed: {RANK}"
    )
    assert lines[-len(expected) :] == expected
    assert not any("Starting vLLM server" in ln for ln in lines)


def test_033_raises_the_error_response_as_a_value_error() -> None:
    code, lines = lora_serve(era="0.33")
    assert code == 1
    assert "(EngineCore_DP0) ERROR [core.py:1849] Invocation of add_lora method failed" in lines
    # 0.33 decorates only the log records: the interpreter's traceback is printed bare
    assert lines[-3:] == [
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/'
        'models/serving.py", line 139, in init_static_loras',
        "    raise ValueError(load_result.error.message)",
        f"ValueError: Call to add_lora method failed: {RANK}",
    ]


def test_max_loras_does_not_size_an_adapter() -> None:
    code, lines = lora_serve("--max-loras", "4")
    assert code == 1
    assert f"(APIServer) Exception: Call to add_lora method failed: {RANK}" in lines


def test_the_adapter_rank_as_the_max_serves() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "labengine", "serve", QWEN, "--enable-lora", "--lora-modules", R64,
         "--max-lora-rank", "64", "--host", "127.0.0.1", "--port", str(free_port()),
         "--master-port", str(free_port())],
        env=env | {"GAMEDAY_TIME_SCALE": "1000"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        seen = ""
        while "Starting vLLM server on" not in seen:
            line = proc.stdout.readline()
            assert line, seen[-2000:]
            seen += line
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert "add_lora" not in seen


def test_max_lora_rank_offers_vllms_choices() -> None:
    p = serve(QWEN, "--enable-lora", "--max-lora-rank", "48")
    assert p.returncode == 2
    assert p.stderr == (
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: argument --max-lora-rank: invalid choice: 48 "
        "(choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)\n"
    )
