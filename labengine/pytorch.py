"""Lines the lab engine prints on PyTorch's behalf, as PyTorch's C++ writes them: the c10
logger's prefix and the CUDA caching allocator's out-of-memory message."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from labengine import clock

KIB, MIB, GIB = 1024, 1024**2, 1024**3


def c10_prefix(severity: str, file: str, line: int, rank: int | None = None) -> str:
    """What PyTorch's c10 logger puts before a message (c10/util/Logging.cpp,
    MessageLogger::MessageLogger, the non-glog build the PyPI wheels are): `[rank<N>]:` once
    the process group has set the global rank (SetGlobalRank), then `[`, the severity letter,
    the date as `(tm_mon + 1) * 100 + tm_mday` with no padding (`W604` on 4 June, `W1229` on 29
    December), the time `%H:%M:%S` padded, a dot and `std::setw(9)` of CLOCK_MONOTONIC's
    tv_nsec (nine digits, not the wall clock's fraction), the file's basename and line, `] `.
    Checked against torch 2.13's libc10 run under faketime: `[rank0]:[I109 08:05:07.983353369
    socket.cpp:955] `."""
    t = clock.localtime()
    ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC) % 1_000_000_000
    date = (t.tm_mon) * 100 + t.tm_mday  # struct_time's tm_mon is already 1-based
    ranked = f"[rank{rank}]:" if rank is not None else ""
    return (
        f"{ranked}[{severity}{date} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{ns:09d} "
        f"{file}:{line}] "
    )


def format_size(nbytes: int) -> str:
    """c10/cuda/CUDACachingAllocator.cpp format_size: two decimals, in bytes up to 1 KiB, KiB
    up to 1 MiB, MiB up to 1 GiB, else GiB (each bound included in the smaller unit)."""
    if nbytes <= KIB:
        return f"{nbytes} bytes"
    if nbytes <= MIB:
        return f"{nbytes / KIB:.2f} KiB"
    if nbytes <= GIB:
        return f"{nbytes / MIB:.2f} MiB"
    return f"{nbytes / GIB:.2f} GiB"


def cuda_oom(
    alloc: int,
    total: int,
    free: int,
    procs: Sequence[tuple[int, int]],
    allocated: int,
    reserved: int,
    self_pid: int | None = None,
) -> str:
    """DeviceCachingAllocator::malloc's OutOfMemoryError (c10/cuda/CUDACachingAllocator.cpp):
    `procs` are the device's processes as NVML lists them, (pid, bytes in use), and
    reportProcessMemoryInfo names each: this process "Including non-PyTorch memory, this process
    has X memory in use. ", any other "Process N has X memory in use. "."""
    me = os.getpid() if self_pid is None else self_pid
    proc_info = "".join(
        ("Including non-PyTorch memory, this process" if pid == me else f"Process {pid}")
        + f" has {format_size(used)} memory in use. "
        for pid, used in procs
    )
    return (
        f"CUDA out of memory. Tried to allocate {format_size(alloc)}. GPU 0 has a total "
        f"capacity of {format_size(total)} of which {format_size(free)} is free. {proc_info}"
        f"Of the allocated memory {format_size(allocated)} is allocated by PyTorch, and "
        f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. If reserved "
        "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
