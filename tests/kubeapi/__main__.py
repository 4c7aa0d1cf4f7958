"""`python -m tests.kubeapi --port 16443 --kubeconfig build/kubeapi/kubeconfig --time-scale 100`"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from tests.kubeapi.server import Server


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.kubeapi", description=__doc__)
    ap.add_argument("--port", type=int, default=16443)
    ap.add_argument("--kubeconfig", type=Path, default=Path("build/kubeapi/kubeconfig"))
    ap.add_argument("--time-scale", type=float, default=100.0)
    ap.add_argument("--gpus", type=int, default=1, help="nvidia.com/gpu per node")
    ap.add_argument("--nodes", type=int, default=7, help="GPU nodes (g5.xlarge-like)")
    a = ap.parse_args()
    server = Server(a.port, a.kubeconfig, a.time_scale, a.gpus, a.nodes).start()
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"kubeapi: serving {server.url}; kubeconfig {a.kubeconfig}", flush=True)
    done.wait()
    server.stop()  # and every container still running
    sys.exit(0)


if __name__ == "__main__":
    main()
