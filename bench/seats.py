"""Workshop seats on this machine: bring-up time (wall seconds of `gameday workshop up`) and
memory per seat (the resident set of the seat's supervisor and every process under it: engine
nodes, node-exporters, Prometheus; read from /proc) for 1, 4, 8 and 12 local-lab seats, and how
many seats fit in this machine's memory at that rate. Also 4 seats one at a time (`--jobs 1`), to
show what bringing seats up concurrently buys on this machine.

    python bench/seats.py [--seats 1,4,8,12] [--no-append]

Prints the figures and appends them to bench/RESULTS.md under a heading of their own. Each
`workshop up` is followed by `workshop down`, which must leave nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "inventories" / "local.yaml"
GOAL_SEATS, GOAL_S = 12, 30.0


def gameday(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"GAMEDAY_STATE_DIR": str(state)},
        timeout=1800,
    )
    if p.returncode != 0:
        raise SystemExit(f"gameday {' '.join(args)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return p


def children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(proc.name))
    return kids


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def seat_rss_mib(state: Path, k: int) -> float:
    """The seat's supervisor and all its descendants, in MiB."""
    root = int((state / f"local-p{k}" / "supervisor.pid").read_text())
    kids = children()
    todo, total = [root], 0
    while todo:
        pid = todo.pop()
        total += rss_kib(pid)
        todo += kids.get(pid, [])
    return total / 1024


def mem_kib(field: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure(n: int, jobs: int | None) -> tuple[float, float]:
    """(wall seconds of `workshop up`, mean MiB per seat)."""
    with tempfile.TemporaryDirectory(prefix="gameday-seats-") as tmp:
        state = Path(tmp)
        extra = ["--jobs", str(jobs)] if jobs else []
        t0 = time.monotonic()
        gameday(state, "workshop", "up", "--seats", str(n), "--lab", str(LAB), *extra)
        wall = time.monotonic() - t0
        try:
            per_seat = sum(seat_rss_mib(state, k) for k in range(1, n + 1)) / n
        finally:
            gameday(state, "workshop", "down", "--lab", str(LAB))
        return wall, per_seat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seats", default="1,4,8,12")
    ap.add_argument("--no-append", action="store_true")
    a = ap.parse_args()
    counts = [int(x) for x in a.seats.split(",")]
    avail_mib = mem_kib("MemAvailable") / 1024
    total_mib = mem_kib("MemTotal") / 1024
    rows = []
    for n in counts:
        wall, per = measure(n, None)
        rows.append((n, "all", wall, per))
        print(
            f"{n:>3} seats (concurrent): up in {wall:6.1f} s, {per:6.1f} MiB per seat", flush=True
        )
    serial = None
    if 4 in counts:
        wall, per = measure(4, 1)
        serial = wall
        rows.append((4, "1", wall, per))
        print(f"  4 seats (--jobs 1):   up in {wall:6.1f} s, {per:6.1f} MiB per seat", flush=True)
    per_seat = max(r[3] for r in rows)
    fits = int(avail_mib // per_seat)
    goal = next((r[2] for r in rows if r[0] == GOAL_SEATS and r[1] == "all"), None)
    lines = [
        f"## Workshop seats (`python bench/seats.py`), {datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, {os.cpu_count()} cores, {total_mib / 1024:.1f} GiB, "
        f"Python {platform.python_version()} (issue 16)",
        "",
        "| seats | brought up | `workshop up` wall s | RSS per seat MiB |",
        "|---:|---|---:|---:|",
        *(
            f"| {n} | {'all at once' if j == 'all' else 'one at a time'} | {w:.1f} | {p:.1f} |"
            for n, j, w, p in rows
        ),
        "",
        f"Seats that fit in the memory available when the bench started ({avail_mib / 1024:.1f} "
        f"GiB) at {per_seat:.0f} MiB a seat: {fits}.",
    ]
    if goal is not None:
        met = "met" if goal < GOAL_S else "NOT met"
        lines.append(f"Goal {GOAL_SEATS} seats up in under {GOAL_S:.0f} s: {met} ({goal:.1f} s).")
    if serial is not None:
        conc = next(r[2] for r in rows if r[0] == 4 and r[1] == "all")
        lines.append(
            f"4 seats all at once {conc:.1f} s vs one at a time {serial:.1f} s "
            f"({serial / conc:.2f}x)."
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.no_append:
        with (ROOT / "bench" / "RESULTS.md").open("a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
