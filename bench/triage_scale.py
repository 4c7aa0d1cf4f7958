"""`gameday triage` on a large log: wall time and peak resident memory of the command as a user
runs it (`gameday triage FILE --json`, in a process of its own), for a log of many short lines
with known failures at its end, the case where every pattern has to read the whole log.

    python bench/triage_scale.py [--lines 1000000[,20000,...]] [--pad 0] [--goal-s 10]
        [--goal-mb 500]

The log mixes the shapes a pasted log has, most of them lines that continue the one before (no
level, no stamp: every such line could take part in a wrapped message), then records of their
own (a level, a process prefix, a stamp), collector prefixes and blank lines, about 30 bytes
each; then the corpus excerpts of several failures. Prints one line per size: lines, MiB,
seconds, peak MiB, the exit code and the scenarios found; and whether the largest met the goals.
It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "runner" / "builtin_scenarios"
CORPUS = ROOT / "tests" / "data" / "triage"
TAIL = ("several-svc-then-kv.log", "seed000-worker-heartbeat.log", "seed001-triton-800.log")

# cycled: mostly lines that continue the one before (no level, no stamp, no prefix: each could
# take part in a message wrapped over the next 7), then a record of its own, a collector's
# prefixed line, a process's record and a blank line
SHAPES = (
    *(f"  step {{i}} of shard {k}: ok" for k in range(12)),
    "INFO 12-01 10:00:00 [engine.py:88] tick {i}",
    "node1-1  | heartbeat {i}",
    "(APIServer pid=1) INFO:     127.0.0.1:5{j} - GET /health 200",
    "",
)


def make_log(path: Path, lines: int, pad: int = 0) -> None:
    tail = "".join((CORPUS / name).read_text() for name in TAIL)
    words = " and then some more words of no interest" * (pad // 40 + 1)
    with path.open("w") as f:
        for i in range(lines):
            line = SHAPES[i % len(SHAPES)].format(i=i, j=i % 1000)
            f.write((line + words[:pad] if line else line) + "\n")
        f.write(tail)


def measure(log: Path) -> tuple[float, float, int, str, str]:
    """(seconds, peak resident MiB, exit code, stdout, stderr) of one `gameday triage` process."""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "runner.cli", "triage", "--json", "--scenarios", str(SCENARIOS)]
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([*argv, str(log)], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        texts = [f.read().decode(errors="replace") for f in (out, err)]
    return seconds, usage.ru_maxrss / 1024, p.returncode, texts[0], texts[1]


def found(stdout: str) -> str:
    try:
        [report] = json.loads(stdout)
    except ValueError:
        return "-"
    return ", ".join(f["scenario"] for f in report["findings"]) or "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="1000000", help="comma-separated sizes [1000000]")
    ap.add_argument("--pad", type=int, default=0, help="characters added to every line [0]")
    ap.add_argument("--goal-s", type=float, default=10.0)
    ap.add_argument("--goal-mb", type=float, default=500.0)
    args = ap.parse_args()
    sizes = [int(n) for n in args.lines.split(",")]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; self {self_rss():.0f} MiB")
    print(f"{'lines':>9} {'MiB':>7} {'seconds':>8} {'peak MiB':>9} {'exit':>4}  found")
    last: tuple[float, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            log = Path(tmp) / f"{n}.log"
            make_log(log, n, args.pad)
            seconds, peak, code, stdout, stderr = measure(log)
            size = log.stat().st_size / 2**20
            print(f"{n:>9} {size:>7.1f} {seconds:>8.2f} {peak:>9.0f} {code:>4}  {found(stdout)}")
            if code not in (0, 1):
                print(stderr[-2000:])
            last = (seconds, peak)
            log.unlink()
    if last is not None:
        ok = last[0] < args.goal_s and last[1] < args.goal_mb
        print(
            f"largest: {last[0]:.2f} s (goal < {args.goal_s:g}), {last[1]:.0f} MiB peak "
            f"(goal < {args.goal_mb:g}): {'met' if ok else 'NOT met'}"
        )


def self_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
