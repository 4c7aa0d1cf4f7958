"""Files, both ways.

Reading a file a user named is bounded: only regular files are read, the size check comes before
the read, and the file is opened non-blocking, so `/dev/zero` or a FIFO named as a scenario, a log
or a result is refused at once instead of read (or waited on) forever.

State files that hold secrets (raw environment values, the lab's control socket) are owner-only,
and never seen half-written.

A file that says which programs gameday starts (`gameday.toml`, an inventory) is trusted only when
it is the user's own (or root's, as an installed package's files are) and no one else can write
it, as git trusts a repository (`safe.directory`, CVE-2022-24765): one planted in a shared folder
would otherwise run its own engine command as whoever runs gameday below it."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
import tempfile
from pathlib import Path

from runner.errors import InputError, LabError


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


def check_trusted(
    path: Path | str, st: os.stat_result, error_cls: type[InputError], what: str
) -> None:
    """`error_cls` naming the file when it belongs to another user than the one running gameday
    (root's files excepted: whoever is root can change anything anyway) or when its group or
    anyone can write it."""
    me = os.getuid()
    if st.st_uid not in (me, 0):
        raise error_cls(
            f"refused: this {what} file belongs to user id {st.st_uid}, not to you (user id "
            f"{me}); gameday runs no other user's {what}, which names the programs it starts",
            file=path,
            hint="if it is yours to use, copy it into a folder of your own (or `chown` it); "
            "if not, delete it or run gameday from your own repository",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o002 or (mode & 0o020 and not _own_group(st.st_gid)):
        who = "anyone" if mode & 0o002 else "its group"
        raise error_cls(
            f"refused: {who} can write this {what} file (mode {mode:04o}), so another user "
            "could change the programs it starts",
            file=path,
            hint=f"if you trust its content, `chmod go-w {path}`",
        )


def _own_group(gid: int) -> bool:
    """Whether group `gid` is the user's own private group (a umask of 0002 makes files
    group-writable there, and no other user is in it): its write bit lets no one else in."""
    if gid != os.getgid():
        return False
    try:
        members = grp.getgrgid(gid).gr_mem
        me = pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        return False
    return set(members) <= {me}


def read_bytes(
    path: Path | str,
    limit: int,
    error_cls: type[InputError],
    what: str,
    *,
    trusted: bool = False,
) -> bytes:
    """The file's bytes, or `error_cls` naming the file when it is missing, not a regular file
    or larger than `limit` bytes; with `trusted`, also when check_trusted refuses it (checked on
    the file opened, so it cannot be swapped between the check and the read)."""
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
        st = os.fstat(fd)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            raise error_cls(f"is a directory, not a {what} file", file=path)
        if not stat.S_ISREG(mode):
            raise error_cls(
                f"not a regular file (a device, FIFO or socket), not a {what} file",
                file=path,
                hint="save it to a file first",
            )
        if trusted:
            check_trusted(path, st, error_cls, what)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise error_cls(f"cannot read {what}: {exc.strerror}", file=path) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error_cls(f"{what} file is larger than {limit} bytes", file=path)
    return data
