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


# ---- the node's GPU, shared by every process on the node ------------------------------------
#
# Allocations live as one small JSON file per process in the directory named by
# GAMEDAY_GPU_STATE (the lab gives each node its own; a container gets a per-node volume). A
# process that exits, however it exits, stops counting: entries of dead pids are ignored, as the
# driver frees a dead process's memory. Without GAMEDAY_GPU_STATE a process has the GPU to itself.


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    mib: int


class SharedGpu:
    def __init__(self, state_dir: Path, gpu: GpuType) -> None:
        self.dir = state_dir
        self.gpu = gpu
        self.dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_env(
        cls, gpu: GpuType, env: os._Environ[str] | dict[str, str] = os.environ
    ) -> SharedGpu | None:
        d = env.get("GAMEDAY_GPU_STATE")
        return cls(Path(d), gpu) if d else None

    def allocate(self, name: str, nbytes: int, pid: int | None = None) -> None:
        pid = pid or os.getpid()
        tmp = self.dir / f".{pid}.tmp"
        tmp.write_text(json.dumps({"pid": pid, "name": name, "mib": nbytes // MIB}))
        tmp.replace(self.dir / f"{pid}.json")

    def free(self, pid: int | None = None) -> None:
        (self.dir / f"{pid or os.getpid()}.json").unlink(missing_ok=True)

    def processes(self) -> list[GpuProcess]:
        out = []
        for f in sorted(self.dir.glob("*.json")):
            try:
                d = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if _alive(int(d["pid"])):
                out.append(GpuProcess(int(d["pid"]), str(d["name"]), int(d["mib"])))
            else:
                f.unlink(missing_ok=True)
        return out

    def used_mib(self, exclude_pid: int | None = None) -> int:
        return sum(p.mib for p in self.processes() if p.pid != exclude_pid)

    def free_mib(self) -> int:
        return self.gpu.memory_mib - self.used_mib()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie holds no GPU memory
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def smi_text(shared: SharedGpu) -> str:
    """The parts of `nvidia-smi` that matter here: the GPU, its memory, its processes."""
    g = shared.gpu
    procs = shared.processes()
    used = sum(p.mib for p in procs)
    width = 89

    def row(text: str) -> str:
        return "|" + text.ljust(width) + "|"

    rule = "+" + "-" * width + "+"
    lines = [
        rule,
        row(" GPU  Name" + " " * 42 + "Memory-Usage"),
        row(f"   0  {g.name:<44} {used:>6}MiB / {g.memory_mib:>6}MiB"),
        rule,
        row(" Processes:"),
        row("  GPU        PID   Type   Process name" + " " * 39 + "GPU Memory"),
    ]
    lines += [row(f"    0   {p.pid:>8}      C   {p.name[:48]:<48}  {p.mib:>8}MiB") for p in procs]
    if not procs:
        lines.append(row("  No running processes found"))
    lines.append(rule)
    return "\n".join(lines) + "\n"
