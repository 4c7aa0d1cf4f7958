"""A process's line of /proc/<pid>/stat, read past its command name (which may hold spaces and
parentheses): the state first, then the parent, the process group, ... (proc(5)); and the CPU
counters of /proc/stat, this process's own taken out (`CpuMark`)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields after the command name, or None when the process is gone or unreadable."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int | str) -> bool:
    """The process exists and has not exited: a zombie waits only for its parent (or init) to
    collect its status."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


@dataclass(frozen=True)
class CpuMark:
    """The usable cores' tick counters at one moment (/proc/stat, in USER_HZ ticks): `busy`
    (neither idle nor waiting for I/O) and `total`, and this process's own CPU ticks so far
    (itself and the children it collected: utime, stime, cutime, cstime)."""

    at: float  # time.monotonic()
    cores: int
    busy: int
    total: int
    own: int

    def others_busy(self, later: CpuMark) -> float:
        """How many of the cores other work kept busy between this mark and `later`."""
        span = later.total - self.total
        if span <= 0:
            return 0.0
        others = (later.busy - self.busy) - (later.own - self.own)
        return max(0.0, self.cores * others / span)


def cpu_mark() -> CpuMark | None:
    """The counters now, of the cores this process may run on (a CI container's CPU set, not
    the host's); None where /proc is not there to read."""
    try:
        cpus = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        busy = total = 0
        for line in Path("/proc/stat").read_text().splitlines():
            name, *fields = line.split()
            if name in cpus:
                # user nice system idle iowait irq softirq steal
                ticks = [int(f) for f in fields[:8]]
                total += sum(ticks)
                busy += sum(ticks) - ticks[3] - ticks[4]
        own = stat_fields("self")
        if own is None:
            return None
        # utime stime cutime cstime: fields 14-17 of the line, 12-15 past the command name
        mine = sum(int(f) for f in own[11:15])
    except (AttributeError, OSError, ValueError, IndexError):
        return None
    return CpuMark(time.monotonic(), len(cpus), busy, total, mine)


# The command's start (mark_start, called by runner.cli as it is imported): how busy the machine
# already is can then be read over the time the command spends starting, not waited for.
STARTED: CpuMark | None = None


def mark_start() -> None:
    global STARTED
    STARTED = cpu_mark()
