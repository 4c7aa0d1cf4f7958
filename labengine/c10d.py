"""What PyTorch's NCCL process group prints when its watchdog finds a collective timed out.

Each line is behind c10's logger prefix, as labengine.pytorch.c10_prefix writes it (the date
`(tm_mon + 1) * 100 + tm_mday`, not zero-padded, and the `[rank{N}]:` torch.distributed sets).

The watchdog's lines, as torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp writes them (read from
PyTorch's main branch of early 2026, in a ROCm 7.11 build's copy: WorkNCCL::checkTimeout,
WorkNCCL::handleException, the Watchdog's loop):

- checkTimeout: `LOG(ERROR) << logPrefix() + "Watchdog caught collective operation timeout: " +
  WorkNCCL(...) + " ran for N milliseconds before timing out."`, where WorkNCCL's logPrefix() is
  `[Rank N] ` and the work prints as `WorkNCCL(SeqNum=, OpType=, NumelIn=, NumelOut=,
  Timeout(ms)=)`; the same text becomes a DistBackendError (C10_BUILD_ERROR, three lines down).
- handleException: `[Rank N] Some NCCL operations have failed or timed out. ...` and, with
  TORCH_NCCL_ASYNC_ERROR_HANDLING's default (tear down), `[Rank N] To avoid data inconsistency,
  we are taking the entire process down.`, then it rethrows.
- the watchdog thread: `[PG ID p PG GUID g Rank N] Process group watchdog thread terminated with
  exception: ` + the error's what() (its message, then `Exception raised from checkTimeout at
  .../ProcessGroupNCCL.cpp:L (most recent call first):` and the C++ frames), and the exception
  leaves the thread: std::terminate, libstdc++'s `terminate called after throwing an instance of
  'c10::DistBackendError'` and `  what():  ...`, then abort (SIGABRT).

The source read has no release tag, so the line numbers are those of a 2025 PyTorch release
whose logs show the four statements together (`ProcessGroupNCCL.cpp:818` and `:832` for
handleException's two lines, `:2197` for the watchdog thread's, `Exception raised from
checkTimeout at ...:760`; checkTimeout's LOG(ERROR) is three lines above its C10_BUILD_ERROR, so
`:757`). Other builds print other numbers; a scenario's pattern takes any. The process-group
prefix is the one the lab's other PyTorch line carries (`[PG ID 0 PG GUID 0 Rank N]`, see
labengine.core.heartbeat_line).
"""

from __future__ import annotations

from labengine import pytorch

PG_NCCL_TIMEOUT_S = 600.0  # PyTorch's default NCCL process-group timeout (vLLM passes none)
WATCHDOG_POLL_S = 0.1  # kWatchdogThreadSleepMillis: how often the watchdog looks

CHECK_TIMEOUT_LOG = 757
CHECK_TIMEOUT_RAISE = 760
HANDLE_EXCEPTION = 818
TEAR_DOWN = 832
WATCHDOG_TERMINATED = 2197
TORCH_LIB = "/usr/local/lib/python3.12/dist-packages/torch/lib"


def c10_line(rank: int, severity: str, line: int, message: str) -> str:
    """One line of c10's logger from ProcessGroupNCCL.cpp, behind the rank prefix, stamped by
    the lab clock (labengine.pytorch.c10_prefix)."""
    return f"{pytorch.c10_prefix(severity, 'ProcessGroupNCCL.cpp', line, rank)}{message}"


def work(seq: int, op: str, numel_in: int, numel_out: int, timeout_ms: int) -> str:
    """How a WorkNCCL prints itself (operator<<)."""
    return (
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
        f"Timeout(ms)={timeout_ms})"
    )


def _raised_from(rank: int) -> list[str]:
    """c10::Error's what() after its message: where it was raised, then the C++ frames."""
    base = 0x7F3A00000000 + rank * 0x1000000
    return [
        "Exception raised from checkTimeout at "
        f"/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:{CHECK_TIMEOUT_RAISE} "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
        "std::char_traits<char>, std::allocator<char> >) + 0x9d "
        f"({base + 0x96AFAD:#x} in {TORCH_LIB}/libc10.so)",
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
        "duration<long, std::ratio<1l, 1000l> > >) + 0x2b1 "
        f"({base + 0x5E3611:#x} in {TORCH_LIB}/libtorch_cuda.so)",
        "frame #2: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x14f1 "
        f"({base + 0x5EF3B1:#x} in {TORCH_LIB}/libtorch_cuda.so)",
        "frame #3: c10d::ProcessGroupNCCL::Watchdog::run() + 0xdd "
        f"({base + 0x5F0B5D:#x} in {TORCH_LIB}/libtorch_cuda.so)",
        f"frame #4: <unknown function> + 0xdc253 ({base + 0x2DC253:#x} in "
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6)",
        f"frame #5: <unknown function> + 0x94ac3 ({base + 0x494AC3:#x} in "
        "/usr/lib/x86_64-linux-gnu/libc.so.6)",
        f"frame #6: clone + 0x44 ({base + 0x525A04:#x} in /usr/lib/x86_64-linux-gnu/libc.so.6)",
        "",
    ]


def watchdog_timeout(rank: int, seq: int, numel: int, ran_ms: int, timeout_ms: int) -> list[str]:
    """What a rank prints from its watchdog finding an all-reduce of `numel` elements timed out,
    up to the abort that takes its process down."""
    caught = (
        f"[Rank {rank}] Watchdog caught collective operation timeout: "
        f"{work(seq, 'ALLREDUCE', numel, numel, timeout_ms)} ran for {ran_ms} milliseconds "
        "before timing out."
    )
    terminated = (
        f"[PG ID 0 PG GUID 0 Rank {rank}] Process group watchdog thread terminated with "
        f"exception: {caught}"
    )
    return [
        c10_line(rank, "E", CHECK_TIMEOUT_LOG, caught),
        c10_line(
            rank,
            "E",
            HANDLE_EXCEPTION,
            f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
            "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
            "corrupted/incomplete data.",
        ),
        c10_line(
            rank,
            "E",
            TEAR_DOWN,
            f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        ),
        c10_line(rank, "E", WATCHDOG_TERMINATED, terminated),
        *_raised_from(rank),
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {terminated}",
        *_raised_from(rank),
    ]
