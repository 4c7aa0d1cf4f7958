"""Run a selection of tests several times in a row with CPU cores kept busy, as on a shared CI
machine, and print what happened each round.

    .venv/bin/python bench/under_load.py [--rounds 3] [--busy 1] [PYTEST_ARGS...]
    .venv/bin/python bench/under_load.py --busy 1 --script bench/parallel.py [ITS_ARGS...]

The default selection is the Kubernetes and compose end-to-end tests. With --script, a benchmark
runs once instead (given --rounds, its own figures, its exit code) under the same load.
`--busy N` starts N processes that spin in a tight loop for the whole run (one core each); each
prints how many loop iterations it made, so the load is a figure, not an assumption. Exit
code 0 when every round passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["tests/e2e/test_kubernetes_lab.py", "tests/e2e/test_compose_lab.py"]


def spin(stop: Any, counts: Any) -> None:
    n = 0
    while not stop.is_set():
        for _ in range(100_000):
            n += 1
    counts.put(n)


def counts_of(junit: Path) -> dict[str, int]:
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    out = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    out["passed"] = out["tests"] - out["failures"] - out["errors"] - out["skipped"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=1, help="cores kept busy (default 1)")
    ap.add_argument("--script", type=Path, help="run this benchmark once instead of pytest")
    args, pytest_args = ap.parse_known_args()
    selection = pytest_args or DEFAULT

    stop = mp.Event()
    counts: Any = mp.Queue()
    spinners = [mp.Process(target=spin, args=(stop, counts), daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    began = time.monotonic()
    results = []
    try:
        if args.script is not None:
            t0 = time.monotonic()
            argv = [sys.executable, str(args.script), "--rounds", str(args.rounds), *pytest_args]
            proc = subprocess.run(argv, cwd=ROOT)
            results.append((1, proc.returncode, time.monotonic() - t0, {}))
        for r in range(1, 0 if args.script is not None else args.rounds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                junit = Path(tmp) / "junit.xml"
                t0 = time.monotonic()
                proc = subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     f"--junitxml={junit}", *selection],
                    cwd=ROOT,
                )  # fmt: skip
                wall = time.monotonic() - t0
                c = counts_of(junit) if junit.exists() else {"passed": 0, "tests": 0}
            results.append((r, proc.returncode, wall, c))
            print(
                f"round {r}: exit {proc.returncode}, {wall:.0f} s, "
                + ", ".join(f"{k} {v}" for k, v in c.items()),
                flush=True,
            )
    finally:
        stop.set()
        total = time.monotonic() - began
        loops = [counts.get(timeout=30) for _ in spinners]
        for p in spinners:
            p.join(timeout=10)
    for i, n in enumerate(loops):
        print(f"busy loop {i}: {n:,} iterations in {total:.0f} s ({n / total / 1e6:.1f} M/s)")
    ok = all(rc == 0 for _, rc, _, _ in results)
    print(f"{sum(rc == 0 for _, rc, _, _ in results)}/{len(results)} rounds passed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
