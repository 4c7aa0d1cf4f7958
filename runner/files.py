"""Reading a file a user named, bounded. The size check comes before the read: `/dev/zero` or a
FIFO named as a scenario, a log or a result would otherwise be read forever (or block forever).
Only regular files are read; the file is opened non-blocking so that opening a FIFO returns at
once, and then refused as not a regular file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runner.errors import InputError


def read_bytes(path: Path | str, limit: int, error_cls: type[InputError], what: str) -> bytes:
    """The file's bytes, or `error_cls` naming the file when it is missing, not a regular file
    or larger than `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error_cls(
            f"no such {what} file",
            file=path,
            hint="check the path (relative paths are from the current directory)",
        ) from None
    except OSError as exc:
        raise error_cls(f"cannot read {what}: {exc.strerror}", file=path) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error_cls(f"is a directory, not a {what} file", file=path)
        if not stat.S_ISREG(mode):
            raise error_cls(
                f"not a regular file (a device, FIFO or socket), not a {what} file",
                file=path,
                hint="save it to a file first",
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise error_cls(f"cannot read {what}: {exc.strerror}", file=path) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error_cls(f"{what} file is larger than {limit} bytes", file=path)
    return data
