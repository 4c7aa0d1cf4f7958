"""A process's line of /proc/<pid>/stat, read past its command name (which may hold spaces and
parentheses): the state first, then the parent, the process group, ... (proc(5))."""

from __future__ import annotations

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
