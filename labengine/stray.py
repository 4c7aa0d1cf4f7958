"""A stray GPU program, like the one in the stray GPU process write-up: an unrelated vision-model
server (OmniParser) started on a node whose GPU the engine already fills. It takes ~1.4 GiB of GPU
context, its warm-up fails on a missing import, and it idles holding the memory until it is
stopped.

    vllm-lab stray [--name NAME] [--mib MIB]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from labengine.pytorch import cuda_oom
from vllmfacts.gpu import MIB, GpuConfigError, SharedGpu, node_gpus


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--name", default="/omniparser/venv/bin/python", help="the process name nvidia-smi shows"
    )
    ap.add_argument("--mib", type=int, default=1417, help="the GPU memory it holds (MiB)")


def run(name: str, mib: int, env: dict[str, str]) -> int:
    """Run until stopped (exit 0 on SIGTERM); exit 1 at once if the GPU cannot take it."""
    try:
        gpus = node_gpus(env)
    except GpuConfigError as exc:
        print(f"[omniparser] {exc}", flush=True)
        return 1
    shared = SharedGpu.from_env(gpus.gpu, env)
    print("[omniparser] loading icon_detect and icon_caption models on cuda:0", flush=True)
    if shared is not None:
        if (shared.dir / "guard").exists():
            print(
                "[omniparser] RuntimeError: refusing to start a GPU job: the GPU is reserved "
                f"for the serving engine ({(shared.dir / 'guard').read_text().strip()})",
                flush=True,
            )
            return 1
        if shared.free_mib() < mib:
            # the allocator's own message, every other process on the device named (this one
            # holds nothing yet)
            others = sorted((p.pid, p.mib * MIB) for p in shared.processes())
            total = gpus.gpu.cuda_total_bytes  # what CUDA reports, as the engine's OOM does
            free = max(0, total - shared.used_mib() * MIB)
            oom = cuda_oom(mib * MIB, total, free, others, 0, 0)
            print(f"[omniparser] torch.OutOfMemoryError: {oom}", flush=True)
            return 1
        shared.allocate(name, mib * MIB)
    print("[omniparser] warmup failed: name 'torch' is not defined", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:  # a zombie server: does nothing, holds its GPU context
        time.sleep(3600)
