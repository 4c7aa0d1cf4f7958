"""Where a service-link VLLM_PORT stops the engine core, per era (vLLM's own source decides)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

URI = "tcp://10.100.236.130:8000"
MESSAGE = (
    f"ValueError: VLLM_PORT '{URI}' appears to be a URI. This may be caused by a Kubernetes "
    "service discovery issue,check the warning in: https://docs.vllm.ai/en/"
)
DOCS = {
    "0.19": "stable/serving/env_vars.html",
    "0.33": "latest/configuration/env_vars.html",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(era: str) -> tuple[int, list[str]]:
    env = os.environ | {
        "GAMEDAY_VLLM_ERA": era,
        "GAMEDAY_TIME_SCALE": "1000",
        "VLLM_PORT": URI,
    }
    env.pop("GAMEDAY_GPU_STATE", None)
    vllm_lab = Path(sys.executable).parent / "vllm-lab"
    args = ["Qwen/Qwen2.5-14B-Instruct-AWQ", "--max-model-len", "4096", "--host", "127.0.0.1"]
    done = subprocess.run(
        [str(vllm_lab), "serve", *args, "--port", str(_free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


def _index(lines: list[str], text: str) -> int:
    return next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize("era", ["0.19", "0.33"])
def test_the_uri_message_and_where_it_stops(era: str) -> None:
    code, lines = _serve(era)
    assert code == 1
    failed = _index(lines, "EngineCore failed to start.")
    assert _index(lines, MESSAGE + DOCS[era]) > failed
    loaded = [i for i, ln in enumerate(lines) if "Loading weights took" in ln]
    if era == "0.19":
        # 0.19 reads VLLM_PORT for the process group's tcp:// init method, before any weights
        assert loaded == []
        assert _index(lines, "in get_open_port") > failed
    else:
        # 0.33's group meets at a file:// store; enable_envs_cache() at the end of the
        # EngineCore constructor is the first read, after the weights and the warm-up
        assert len(loaded) == 1 and loaded[0] < failed
        assert _index(lines, "init engine (profile, create kv cache, warmup model)") < failed
        assert _index(lines, "in enable_envs_cache") > failed
