"""A GPU XID error on the lab engine's node: the driver's kernel-log lines, the engine's CUDA
error at its next request and at every start until the device is reset, the seeds' watch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.integration.labengine.test_engine import QWEN, free_port, serve
from vllmfacts import xid
from vllmfacts.xid import Xid

SCALE = {"GAMEDAY_TIME_SCALE": "1000"}
SERVE = [sys.executable, "-m", "labengine", "serve"]


def _env(state: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    return e | SCALE | {"GAMEDAY_GPU_STATE": str(state)}


def _start_xid(state: Path, code: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "labengine", "xid", "--xid", str(code)],
        env=_env(state),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("NVRM: Xid (PCI:0000:00:1e): ")
    return proc


_ENGINES: dict[str, subprocess.Popen[str]] = {}


@contextmanager
def _serving(state: Path) -> Iterator[str]:
    """A serving engine on the node whose GPU state is `state`, while the block runs."""
    port = free_port()
    engine = subprocess.Popen(
        [*SERVE, QWEN, "--host", "127.0.0.1", "--port", str(port)],
        env=_env(state),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    _ENGINES[url] = engine
    try:
        deadline = time.monotonic() + 60
        while True:
            assert engine.poll() is None and time.monotonic() < deadline, "it never served"
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        _ENGINES.pop(url)
        engine.kill()
        engine.wait()


def _reset(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=10)


@pytest.mark.parametrize(
    ("code", "final", "culprit"),
    [
        # the bus loss has no channel in error; the double-bit error names the engine's
        (
            79,
            "torch.AcceleratorError: CUDA error: unspecified launch failure",
            "'<unknown>', name=<unknown>",
        ),
        (
            48,
            "torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered",
            r"\d+, name=VLLM::EngineCor",
        ),
    ],
)
def test_a_serving_engine_dies_at_its_next_request_and_cannot_start_until_reset(
    tmp_path: Path, code: int, final: str, culprit: str
) -> None:
    state = tmp_path / "gpu"
    body = {"model": QWEN, "prompt": "Hello", "max_tokens": 4}
    with _serving(state) as url:
        engine = _ENGINES[url]
        assert httpx.post(url + "/v1/completions", json=body, timeout=10).status_code == 200
        fault = _start_xid(state, code)
        try:
            r = httpx.post(url + "/v1/completions", json=body, timeout=10)
            assert r.status_code >= 500
            out, _ = engine.communicate(timeout=30)
            assert engine.returncode == 0  # EngineDeadError: the server shuts down cleanly
            assert "EngineCore encountered a fatal error." in out
            assert 'gpu_model_runner.py", line 6943, in _to_list' in out
            assert final in out
            assert "EngineDeadError" in out
            # a restart on the broken device fails at the worker's first CUDA call
            again = serve(QWEN, "--port", str(free_port()), env={"GAMEDAY_GPU_STATE": str(state)})
            assert again.returncode == 1
            assert 'gpu_worker.py", line 255, in init_device' in again.stdout + again.stderr
            assert final in again.stdout + again.stderr
        finally:
            assert _reset(fault) == 0
        assert xid.fault(state) is None  # the reset: the device works again
        with _serving(state) as url:
            assert httpx.post(url + "/v1/completions", json=body, timeout=10).status_code == 200
    log = (state / xid.KERNEL_LOG).read_text()
    assert re.search(rf"NVRM: Xid \(PCI:0000:00:1e\): {code}, pid={culprit}, ", log), log


def test_the_fault_lasts_as_long_as_its_holder(tmp_path: Path) -> None:
    assert xid.fault(tmp_path) is None
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from vllmfacts import xid; "
         "xid.hold_fault(Path(sys.argv[1]), xid.Xid(48)); print('held', flush=True); "
         "time.sleep(30)", str(tmp_path)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        assert xid.fault(tmp_path) is Xid.DOUBLE_BIT_ECC
    finally:
        holder.kill()  # however it ends, the reset
        holder.wait()
    assert xid.fault(tmp_path) is None
    assert not (tmp_path / xid.FAULT_FILE).exists()
