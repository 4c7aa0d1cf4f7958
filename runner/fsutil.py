"""State files that hold secrets (raw environment values, the lab's control socket): owner-only,
and never seen half-written."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from runner.errors import LabError


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter: created 0700 (its parents as usual), an
    existing one of ours tightened to 0700, one of another user's refused (whoever owns the
    directory can swap what is in it)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise LabError(
            f"the state directory {path} belongs to user id {st.st_uid}, not to you",
            hint="choose a state directory of your own (gameday_lab.state_dir or "
            "GAMEDAY_STATE_DIR)",
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a file just created or renamed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, mode 0600. The text goes to a temporary file beside it
    (mkstemp creates it 0600), is fsynced, and is renamed over `path`: a reader, or the next run
    after a crash, finds the old content or the new, never part of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
