"""The engine's runtime failure mechanics, without a lab."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from labengine import core
from labengine.core import DEEPGEMM_800, TRITON_800, _jit_load
from labengine.logs import VllmLog
from tests.unit.labengine.test_memory_models import LLAMA, settings
from vllmfacts.gpu import MIB, SharedGpu, gpu_types, smi_text


class Settings:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env


@pytest.fixture
def gpu(tmp_path: Path) -> SharedGpu:
    return SharedGpu(tmp_path / "gpu", gpu_types()["a10g"])


@contextmanager
def stray_on(gpu: SharedGpu) -> Iterator[subprocess.Popen[bytes]]:
    """A stray vision server holding 1,417 MiB of the shared GPU while the block runs."""
    code = (
        "import sys, time; from pathlib import Path; from vllmfacts.gpu import *; "
        "g = SharedGpu(Path(sys.argv[1]), gpu_types()['a10g']); "
        "g.allocate('/omniparser/venv/bin/python', 1417 * MIB); print('held', flush=True); "
        "time.sleep(30)"
    )
    stray = subprocess.Popen([sys.executable, "-c", code, str(gpu.dir)], stdout=subprocess.PIPE)
    try:
        assert stray.stdout is not None and stray.stdout.readline() == b"held\n"
        yield stray
    finally:
        stray.kill()
        stray.wait()


def test_kernel_load_refused_only_with_a_stranger_and_thin_headroom(gpu: SharedGpu) -> None:
    gpu.allocate("VLLM::Worker_TP0", 21_429 * MIB)  # this process: the engine
    assert _jit_load(Settings({}), gpu, None) is None  # alone on its GPU: fine
    with stray_on(gpu) as stray:
        assert gpu.free_mib() == 23_028 - 21_429 - 1_417
        assert _jit_load(Settings({}), gpu, None) == DEEPGEMM_800
        assert _jit_load(Settings({"VLLM_USE_DEEP_GEMM": "0"}), gpu, None) == TRITON_800
        text = smi_text(gpu).splitlines()
        assert text[2].split() == ["|", "0", "NVIDIA", "A10G", "22846MiB", "/", "23028MiB", "|"]
        rows = sorted(ln.split() for ln in text[6:-1])  # 21,429 + 1,417 MiB held
        assert rows == sorted(
            [
                ["|", "0", str(os.getpid()), "C", "VLLM::Worker_TP0", "21429MiB", "|"],
                ["|", "0", str(stray.pid), "C", "/omniparser/venv/bin/python", "1417MiB", "|"],
            ]
        )
    assert [p.name for p in gpu.processes()] == ["VLLM::Worker_TP0"]  # the dead free theirs
    assert _jit_load(Settings({}), gpu, None) is None


def test_a_stranger_on_the_gpu_is_in_the_engines_oom(gpu: SharedGpu) -> None:
    """The weights-load OOM names every process on the device, as NVML lists them to PyTorch
    (c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo)."""
    with stray_on(gpu) as stray, pytest.raises(core.EngineStartError) as exc:
        core._load_weights(settings(LLAMA, dtype="float32"), VllmLog("E", io.StringIO()), gpu)
    assert f"Process {stray.pid} has 1.38 GiB memory in use. " in exc.value.message


def test_the_stray_that_does_not_fit_says_so_as_pytorch_does(gpu: SharedGpu) -> None:
    """`vllm-lab stray` on a GPU the engine fills: the allocator's message, the engine named."""
    gpu.allocate("VLLM::Worker_TP0", 22_000 * MIB)  # this process stands for the engine
    env = os.environ | {"GAMEDAY_GPU_STATE": str(gpu.dir), "GAMEDAY_GPU": "a10g"}
    p = subprocess.run(
        [sys.executable, "-m", "labengine", "stray"], env=env, capture_output=True, text=True
    )
    assert p.returncode == 1
    assert (
        "[omniparser] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.38 GiB. GPU "
        f"0 has a total capacity of 22.30 GiB of which 838.00 MiB is free. Process {os.getpid()} "
        "has 21.48 GiB memory in use. Of the allocated memory 0 bytes is allocated by PyTorch, "
        "and 0 bytes is reserved by PyTorch but unallocated."
    ) in p.stdout
