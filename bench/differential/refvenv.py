"""The reference venv: real `vllm` with the CPU torch, outside the repository, cached.

    python -m venv <dir>; pip install torch==<cpu build>; pip install --no-deps <vllm wheel>;
    pip install <the wheel's METADATA requirements less the GPU-only ones and torch's family>;
    pip install --no-deps <the platform plugin of bench/differential/plugin>

Nothing here is imported by the lab engine or the runner; bench/differential.py drives it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

HERE = Path(__file__).resolve().parent
TORCH = "torch==2.13.0+cpu"  # the local version label matches the CPU build only, never a CUDA one
# Requirements whose wheels carry CUDA kernels or that pin torch's family to a CUDA release; the
# CPU torch above stands in for torch itself.
GPU_ONLY = frozenset(
    {
        "torch",
        "torchaudio",
        "torchvision",
        "torchcodec",
        "pynvvideocodec",
        "flashinfer-python",
        "flashinfer-cubin",
        "apache-tvm-ffi",
        "tilelang",
        "nvtx",
        "fastsafetensors",
        "instanttensor",
        "quack-kernels",
        "tokenspeed-mla",
        "humming-kernels",
    }
)


def canonical(name: str) -> str:
    """PEP 503's normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cpu_requirements(metadata: str) -> list[str]:
    """The `Requires-Dist` lines of a wheel's METADATA that a CPU-only venv installs.

    Lines for an extra, lines whose marker is false here, `nvidia-*` and GPU_ONLY are left out.
    """
    kept: list[str] = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.partition(":")[2].strip())
        name = canonical(req.name)
        if name in GPU_ONLY or name.startswith("nvidia-"):
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        kept.append(str(req))
    return kept


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode()


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *args], check=True)


def ensure(venv: Path, wheel: Path, log: list[str], base_python: str = sys.executable) -> Path:
    """The venv's python, creating the venv first when it is missing (its time goes to `log`),
    from `base_python` (the interpreter whose standard library the venv's tracebacks show)."""
    python = venv / "bin" / "python"
    marker = venv / ".gameday-complete"
    if marker.exists():
        log.append(f"reference venv {venv}: cached")
        return python
    start = time.monotonic()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True)
    _pip(venv, "--only-binary", ":all:", TORCH)
    _pip(venv, "--no-deps", str(wheel))
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "torch-pin.txt"
        pins.write_text(TORCH + "\n")
        _pip(venv, "-c", str(pins), *cpu_requirements(wheel_metadata(wheel)))
        plugin = Path(tmp) / "plugin"
        shutil.copytree(HERE / "plugin", plugin)
        _pip(venv, "--no-deps", str(plugin))
    marker.write_text(wheel.name + "\n")
    size = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
    log.append(
        f"reference venv {venv}: created in {time.monotonic() - start:.0f} s, "
        f"{size / 2**30:.1f} GiB"
    )
    return python
