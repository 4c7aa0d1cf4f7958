"""`python -m tests.kubereal build`: build (once; cached) the real control plane's binaries.
`python -m tests.kubereal up --dir build/kubereal`: start it on loopback until interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from tests.kubereal import build
from tests.kubereal.cluster import ControlPlane, ControlPlaneError


def _log(msg: str) -> None:
    print(f"kube-control-plane: {msg}", file=sys.stderr, flush=True)


def _up(state: Path) -> int:
    binaries = build.cached()
    if binaries is None:
        _log(f"no build in {build.cache_root()}: run `python -m tests.kubereal build` first")
        return 1
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        cp = ControlPlane(binaries, state).start()
    except ControlPlaneError as e:
        _log(f"error: {e}")
        return 1
    _log(f"serving {cp.url}; kubeconfig {cp.kubeconfig}; pids {cp.pids()}")
    done.wait()
    cp.stop()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.kubereal", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="download and build, or say where the cached build is")
    b.add_argument("--keep-work", action="store_true", help="keep the source and Go build cache")
    u = sub.add_parser("up", help="run the control plane on loopback until SIGINT/SIGTERM")
    u.add_argument("--dir", type=Path, default=Path("build/kubereal"), help="its state (0700)")
    a = ap.parse_args()
    if a.cmd == "up":
        return _up(a.dir)
    try:
        out = build.ensure(log=_log, keep_work=a.keep_work)
    except build.BuildError as e:
        _log(f"error: {e}")
        return 1
    print(out.bin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
