"""The simulated GPUs of a node."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MIB = 2**20


@dataclass(frozen=True)
class GpuType:
    key: str
    name: str
    memory_mib: int
    cuda_total_mib: int
    non_torch_mib: int
    load_gib_s: float
    download_gib_s: float
    large: bool

    @property
    def cuda_total_bytes(self) -> int:
        return self.cuda_total_mib * MIB


@cache
def gpu_types() -> dict[str, GpuType]:
    raw = json.loads((Path(__file__).resolve().parent / "data" / "gpus.json").read_text())
    return {k: GpuType(key=k, **v) for k, v in raw.items() if not k.startswith("_")}


class GpuConfigError(Exception):
    pass


@dataclass(frozen=True)
class NodeGpus:
    gpu: GpuType
    installed: int
    visible: tuple[int, ...]


def node_gpus(env: os._Environ[str] | dict[str, str] = os.environ) -> NodeGpus:
    key = env.get("GAMEDAY_GPU", "a10g")
    types = gpu_types()
    if key not in types:
        raise GpuConfigError(f"GAMEDAY_GPU={key!r} is not one of {sorted(types)}")
    installed = int(env.get("GAMEDAY_GPU_COUNT", "1"))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        visible = tuple(range(installed))
    else:
        visible = tuple(int(x) for x in cvd.split(",") if x.strip() and 0 <= int(x) < installed)
    return NodeGpus(gpu=types[key], installed=installed, visible=visible)
