"""A GPU XID error on a node: the NVIDIA driver's kernel-log line, the CUDA error a process on the
device then gets, the device's fault (it stays unusable until it is reset), and the kernel-log
watch of the seeds (seeds/001: count the kernel log's lines of a kind every 30 s; alert when the
count rises) as a node-exporter textfile metric.

Sources:
- The driver's line: NVIDIA open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
  krcReportXid: `"NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s\\n"` (domain, bus,
  device; the XID; the pid and name of the channel's process, `'<unknown>'` and `<unknown>` when
  no channel is in error). XID 79's message is osHandleGpuLost's `"GPU has fallen off the bus."`
  (src/nvidia/arch/nvalloc/unix/src/osinit.c), followed by the device print
  `NVRM: GPU %04x:%02x:%02x.%x: GPU has fallen off the bus.`. XID 48's is the framebuffer's
  "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at
  partition %d, subpartition %d.". The dmesg prefix is the kernel's `[%5lu.%06lu] ` (seconds since
  boot).
- The CUDA error: PyTorch c10/cuda/CUDAException.cpp c10_cuda_check_implementation raises
  c10::AcceleratorError (torch.AcceleratorError in Python) with "CUDA error: " +
  cudaGetErrorString(err), then c10/cuda/CUDAMiscFunctions.cpp's get_cuda_error_help
  ("Search for `<cudaGetErrorName>' in ...") and get_cuda_async_error_suffix. The strings are
  the CUDA runtime's: cudaErrorLaunchFailure (719) "unspecified launch failure",
  cudaErrorECCUncorrectable (214) "uncorrectable ECC error encountered".
"""

from __future__ import annotations

import enum
import fcntl
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

# the A10G of an AWS g5 instance sits at 0000:00:1e.0
PCI_DOMAIN, PCI_BUS, PCI_DEVICE, PCI_FUNCTION = 0, 0x00, 0x1E, 0

FAULT_FILE = "xid-fault.json"  # in GAMEDAY_GPU_STATE: the device's fault, held by its holder
KERNEL_LOG = "kern.log"  # the node's kernel ring buffer as `dmesg` prints it
TEXTFILE_DIR = "textfile"  # node-exporter's --collector.textfile.directory
METRIC = "node_kernel_log_nvrm_xid_lines"  # the watch's count, one series per XID
WATCH_INTERVAL_S = 30.0  # seeds/001: the kernel log counted every 30 s (real seconds)
# the kernel's /proc/sys/kernel/random/boot_id, one per boot: the watch labels its counts with
# it, so a count after a reboot is a new series, never compared with the last boot's (an XID
# after a reboot pages even when the last boot's count, within the alert's window, was the same)
BOOT_ID_FILE = "boot_id"


class Xid(enum.IntEnum):
    """The XIDs a scenario can raise: both leave the device unusable until it is reset."""

    DOUBLE_BIT_ECC = 48
    FALLEN_OFF_THE_BUS = 79


@dataclass(frozen=True)
class XidFacts:
    message: str  # what the driver prints after the XID
    cuda_error_name: str  # cudaGetErrorName
    cuda_error_string: str  # cudaGetErrorString
    asynchronous: bool  # get_cuda_async_error_suffix's launch-failure family


FACTS: dict[Xid, XidFacts] = {
    Xid.FALLEN_OFF_THE_BUS: XidFacts(
        "GPU has fallen off the bus.",
        "cudaErrorLaunchFailure",
        "unspecified launch failure",
        True,
    ),
    Xid.DOUBLE_BIT_ECC: XidFacts(
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
        "partition 0, subpartition 0.",
        "cudaErrorECCUncorrectable",
        "uncorrectable ECC error encountered",
        False,
    ),
}


def pci_short() -> str:
    """The driver's `PCI:%04x:%02x:%02x` (no function)."""
    return f"{PCI_DOMAIN:04x}:{PCI_BUS:02x}:{PCI_DEVICE:02x}"


def xid_line(xid: Xid, pid: int | None, name: str | None) -> str:
    """krcReportXid's line (the legacy, non-MIG form)."""
    pid_s = str(pid) if pid is not None else "'<unknown>'"
    return (
        f"NVRM: Xid (PCI:{pci_short()}): {int(xid)}, pid={pid_s}, name={name or '<unknown>'}, "
        f"{FACTS[xid].message}"
    )


def kernel_lines(xid: Xid, pid: int | None, name: str | None) -> list[str]:
    """What the driver writes to the kernel log for the XID."""
    lines = [xid_line(xid, pid, name)]
    if xid is Xid.FALLEN_OFF_THE_BUS:
        dev = f"{PCI_DOMAIN:04x}:{PCI_BUS:02x}:{PCI_DEVICE:02x}.{PCI_FUNCTION:x}"
        lines.append(f"NVRM: GPU {dev}: GPU has fallen off the bus.")
    return lines


def cuda_error(xid: Xid) -> str:
    """torch.AcceleratorError's message for the CUDA error a process on the device gets."""
    f = FACTS[xid]
    text = (
        f"CUDA error: {f.cuda_error_string}\nSearch for `{f.cuda_error_name}' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more "
        "information.\n"
    )
    if f.asynchronous:
        text += (
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.\nFor debugging consider passing "
            "CUDA_LAUNCH_BLOCKING=1\n"
        )
    else:
        text += "For more detailed error information, run with CUDA_LOG_FILE=stderr\n"
    # a release build has no device-side assertions (c10_retrieve_device_side_assertion_info)
    return text + "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"


def dmesg_prefix(uptime_s: float) -> str:
    """The kernel's printk time prefix, `[%5lu.%06lu] `."""
    whole = int(uptime_s)
    return f"[{whole:5d}.{int((uptime_s - whole) * 1_000_000):06d}] "


# ---- the device's fault, and the node's kernel log -------------------------------------------
#
# The fault is a file in the node's GPU state directory, flock-held by the process that stands
# for the broken device: while it lives the device is unusable; ending it is the reset (as
# SharedGpu's allocations stop counting when their process is gone, however it goes).

_HELD: list[int] = []


def fault(state_dir: Path) -> Xid | None:
    """The XID the device is stuck in, or None if it is usable."""
    path = state_dir / FAULT_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: the device is still broken
            with os.fdopen(os.dup(fd)) as fh:
                return Xid(int(json.loads(fh.read())["xid"]))
        path.unlink(missing_ok=True)  # nobody holds it: the device was reset
        return None
    except (OSError, ValueError, KeyError):
        return None
    finally:
        os.close(fd)


def broke_at(text: str) -> float | None:
    """When the device broke (Unix seconds), from the fault file's text; None if it says not."""
    try:
        at = json.loads(text)["at"]
    except (ValueError, KeyError, TypeError):
        return None
    return float(at) if isinstance(at, int | float) else None


def hold_fault(state_dir: Path, xid: Xid) -> None:
    """This process is the device's fault until it exits."""
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{FAULT_FILE}.{os.getpid()}.tmp"
    # when the device broke, on the node's clock: the runner reads it as the fault's time (a
    # host action that starts this program takes seconds of its own around that moment)
    tmp.write_text(json.dumps({"xid": int(xid), "at": time.time()}))
    fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    tmp.replace(state_dir / FAULT_FILE)
    _HELD.append(fd)


def append_kernel_log(state_dir: Path, lines: list[str], uptime_s: float | None = None) -> None:
    """Append `lines` to the node's kernel log, each with dmesg's prefix."""
    up = time.monotonic() if uptime_s is None else uptime_s
    with open(state_dir / KERNEL_LOG, "a", encoding="utf-8") as fh:
        fh.writelines(dmesg_prefix(up) + ln + "\n" for ln in lines)


def boot(state_dir: Path) -> None:
    """The node starts: its kernel ring buffer is empty, the watch has counted nothing, and the
    boot has an id of its own."""
    (state_dir / KERNEL_LOG).unlink(missing_ok=True)
    (state_dir / TEXTFILE_DIR / "kernel_log.prom").unlink(missing_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / BOOT_ID_FILE).write_text(str(uuid.uuid4()) + "\n")


def boot_id(state_dir: Path) -> str:
    """This boot's id. A node that never booted through `boot` (a new GPU volume) gets one now,
    its kernel log kept: what is in it was logged during this boot."""
    path = state_dir / BOOT_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        state_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(str(uuid.uuid4()) + "\n")
        return path.read_text().strip()


def count_xids(state_dir: Path) -> dict[Xid, int]:
    """The watch's look: the kernel log's XID lines of each kind (every kind, zero included)."""
    counts = dict.fromkeys(Xid, 0)
    try:
        text = (state_dir / KERNEL_LOG).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return counts
    for line in text.splitlines():
        _, sep, rest = line.partition("NVRM: Xid (PCI:")
        if not sep:
            continue
        _, sep, rest = rest.partition("): ")
        code = rest.split(",", 1)[0]
        if sep and code.isdigit() and int(code) in counts:
            counts[Xid(int(code))] += 1
    return counts


def write_watch(state_dir: Path) -> Path:
    """Count the kernel log's XID lines and write them for node-exporter's textfile collector
    (atomically: the collector may read at any moment)."""
    counts = count_xids(state_dir)
    boot = boot_id(state_dir)
    out = state_dir / TEXTFILE_DIR
    out.mkdir(parents=True, exist_ok=True)
    body = [
        f"# HELP {METRIC} NVRM Xid lines in the kernel log, counted every {WATCH_INTERVAL_S:g} s.",
        f"# TYPE {METRIC} gauge",
        *(f'{METRIC}{{boot_id="{boot}",xid="{int(x)}"}} {n}' for x, n in sorted(counts.items())),
    ]
    tmp = out / ".kernel_log.prom.tmp"
    tmp.write_text("\n".join(body) + "\n")
    tmp.replace(out / "kernel_log.prom")
    return out / "kernel_log.prom"
