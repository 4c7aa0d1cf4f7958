"""A GPU XID error on this node's device (vllmfacts.xid): the driver's lines in the node's kernel
log, the device unusable while this program lives, and the seeds' kernel-log watch (the XID
lines counted every 30 s, lab-scaled, for node-exporter's textfile collector). Stopping it is
the device's reset (`nvidia-smi --gpu-reset -i 0`): the device works again, the kernel log keeps
its lines.

    vllm-lab xid --xid {48,79}
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from vllmfacts import xid
from vllmfacts.gpu import GpuConfigError, SharedGpu, node_gpus


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--xid", type=int, required=True, choices=[int(x) for x in xid.Xid], help="the XID raised"
    )


def run(code: int, env: dict[str, str]) -> int:
    """Break the device, then watch the kernel log until stopped (exit 0 on SIGTERM: reset)."""
    try:
        gpus = node_gpus(env)
    except GpuConfigError as exc:
        print(f"vllm-lab xid: {exc}", file=sys.stderr, flush=True)
        return 2
    shared = SharedGpu.from_env(gpus.gpu, env)
    if shared is None:
        print("vllm-lab xid: GAMEDAY_GPU_STATE is not set (no shared GPU here)", file=sys.stderr)
        return 2
    which = xid.Xid(code)
    # A double-bit error is reported against the channel that met it: the engine's, when it
    # holds the device (its pid, and its name as the kernel keeps it, 15 characters). The bus
    # loss is found by the driver itself (osHandleGpuLost), with no channel in error: the driver
    # prints pid='<unknown>', name=<unknown> (krcReportXid).
    holders = shared.processes() if which is xid.Xid.DOUBLE_BIT_ECC else []
    pid, name = (holders[0].pid, holders[0].name[:15]) if holders else (None, None)
    xid.hold_fault(shared.dir, which)
    xid.append_kernel_log(shared.dir, xid.kernel_lines(which, pid, name))
    for line in xid.kernel_lines(which, pid, name):
        print(line, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    interval = xid.WATCH_INTERVAL_S / float(env.get("GAMEDAY_TIME_SCALE", "1") or 1)
    while True:
        xid.write_watch(shared.dir)
        time.sleep(interval)
