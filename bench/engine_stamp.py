"""`vllm-lab` for the benchmark's detection-latency figure: the lab engine, run in this process;
when it returns, the engine's own clock at that moment and its exit code are appended to the
file named by BENCH_EXIT_STAMP (`<unix time> <exit code>`, one line per exit).

    python bench/engine_stamp.py serve MODEL [flags]

The benchmark's local lab starts its engines through this launcher (its `engine_command`), so
that the engine itself carries no benchmark hook.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from labengine.cli import main as engine_main

STAMP_VAR = "BENCH_EXIT_STAMP"
LAUNCHER = Path(__file__).resolve()


def main(argv: list[str] | None = None) -> int:
    code = engine_main(argv)
    stamp = os.environ.get(STAMP_VAR)
    if stamp:
        with contextlib.suppress(OSError), open(stamp, "a") as f:
            f.write(f"{time.time():.6f} {code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
