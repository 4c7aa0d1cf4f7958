"""The engine's weights-load OOM with another process on its shared GPU: PyTorch names every
process NVML lists on the device (c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from labengine import core
from labengine.logs import VllmLog
from tests.unit.labengine.test_memory_models import LLAMA, settings
from vllmfacts.gpu import SharedGpu, gpu_types


def test_a_stranger_on_the_gpu_is_in_the_engines_oom(tmp_path: Path) -> None:
    """The weights-load OOM with another process holding memory on the shared GPU names it, as
    NVML lists it to PyTorch."""
    gpu = SharedGpu(tmp_path / "gpu", gpu_types()["a10g"])
    code = (
        "import sys, time; from pathlib import Path; from vllmfacts.gpu import *; "
        "g = SharedGpu(Path(sys.argv[1]), gpu_types()['a10g']); "
        "g.allocate('/omniparser/venv/bin/python', 1417 * MIB); print('held', flush=True); "
        "time.sleep(30)"
    )
    stray = subprocess.Popen([sys.executable, "-c", code, str(gpu.dir)], stdout=subprocess.PIPE)
    try:
        assert stray.stdout is not None and stray.stdout.readline() == b"held\n"
        with pytest.raises(core.EngineStartError) as exc:
            core._load_weights(settings(LLAMA, dtype="float32"), VllmLog("E", io.StringIO()), gpu)
        assert f"Process {stray.pid} has 1.38 GiB memory in use. " in exc.value.message
    finally:
        stray.kill()
        stray.wait()
