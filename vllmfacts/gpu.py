"""The simulated GPUs of a node."""

from __future__ import annotations

import fcntl
import json
import os
import socket
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
    profile_non_torch_mib: int
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
# GAMEDAY_GPU_STATE (the local lab gives each node its own; the compose lab mounts a per-node
# volume into every container of the node). A process holds an exclusive flock on its file for as
# long as it lives, so a process that exits, however it exits (SIGKILL included), stops counting,
# as the driver frees a dead process's memory. Locks work across containers and PID namespaces on
# one kernel, where pids do not. Without GAMEDAY_GPU_STATE a process has the GPU to itself.

_HELD: dict[Path, int] = {}  # this process's allocation file -> the fd holding its lock


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

    def _mine(self) -> Path:
        # pids repeat across containers: the host name tells them apart
        return self.dir / f"{socket.gethostname()}-{os.getpid()}.json"

    def allocate(self, name: str, nbytes: int) -> None:
        """This process now holds `nbytes` of GPU memory (replacing what it held)."""
        path = self._mine()
        tmp = self.dir / f".{path.name}.tmp"
        tmp.write_text(json.dumps({"pid": os.getpid(), "name": name, "mib": nbytes // MIB}))
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX)
        tmp.replace(path)
        old = _HELD.pop(path, None)
        _HELD[path] = fd
        if old is not None:
            os.close(old)

    def free(self) -> None:
        path = self._mine()
        path.unlink(missing_ok=True)
        fd = _HELD.pop(path, None)
        if fd is not None:
            os.close(fd)

    def processes(self) -> list[GpuProcess]:
        return [p for _, p in self._held()]

    def _held(self) -> list[tuple[Path, GpuProcess]]:
        out = []
        for f in sorted(self.dir.glob("*.json")):
            try:
                fd = os.open(f, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its process holds it: alive
                    with os.fdopen(os.dup(fd)) as fh:
                        d = json.loads(fh.read())
                    out.append((f, GpuProcess(int(d["pid"]), str(d["name"]), int(d["mib"]))))
                else:  # nobody holds it: its process is gone
                    f.unlink(missing_ok=True)
            except (OSError, ValueError, KeyError):
                continue
            finally:
                os.close(fd)
        return out

    def used_mib(self, exclude_self: bool = False) -> int:
        mine = self._mine()
        return sum(p.mib for f, p in self._held() if not (exclude_self and f == mine))

    def free_mib(self) -> int:
        return self.gpu.memory_mib - self.used_mib()


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
