"""A stray GPU program, like the one in seeds/001: an unrelated vision-model server (OmniParser)
started on a node whose GPU the engine already fills. It takes ~1.4 GiB of GPU context, its
warm-up fails on a missing import, and it idles holding the memory until it is stopped.

    vllm-lab stray [--name NAME] [--mib MIB]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from labengine.gpu import MIB, GpuConfigError, SharedGpu, node_gpus


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="vllm-lab stray")
    ap.add_argument("--name", default="/omniparser/venv/bin/python")
    ap.add_argument("--mib", type=int, default=1417)
    args = ap.parse_args(argv)
    try:
        gpus = node_gpus()
    except GpuConfigError as exc:
        print(f"[omniparser] {exc}", flush=True)
        return 1
    shared = SharedGpu.from_env(gpus.gpu)
    print("[omniparser] loading icon_detect and icon_caption models on cuda:0", flush=True)
    if shared is not None:
        if (shared.dir / "guard").exists():
            print(
                "[omniparser] RuntimeError: refusing to start a GPU job: the GPU is reserved "
                f"for the serving engine ({(shared.dir / 'guard').read_text().strip()})",
                flush=True,
            )
            return 1
        if shared.free_mib() < args.mib:
            print(
                "[omniparser] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                f"{args.mib} MiB",
                flush=True,
            )
            return 1
        shared.allocate(args.name, args.mib * MIB)
    print("[omniparser] warmup failed: name 'torch' is not defined", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:  # a zombie server: does nothing, holds its GPU context
        time.sleep(3600)
