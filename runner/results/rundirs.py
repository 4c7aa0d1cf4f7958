"""The reports folder: one folder per run (reports/<run-id>/), `latest` pointing at the newest
(a symlink; a file holding the run id where the file system has no symlinks), a run named by id,
`latest` or path, and the copies `run --junit/--json/--html PATH` asks for."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runner.errors import InputError

LATEST = "latest"
MAX_ID_BYTES = 200


def link_latest(root: Path, run_dir: Path) -> None:
    """Point root/latest at `run_dir` (a folder in `root`), replacing the old pointer at once."""
    tmp = root / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        tmp.symlink_to(run_dir.name, target_is_directory=True)
    except OSError:  # no symlinks here (some Windows and network file systems)
        tmp.write_text(run_dir.name + "\n")
    os.replace(tmp, root / LATEST)


def run_dirs(root: Path) -> list[Path]:
    """The run folders in `root` that hold a result.json, oldest first (run ids start with
    their UTC start time); `latest` is a pointer, not a run."""
    if not root.is_dir():
        return []
    return sorted(
        p.parent
        for p in root.glob("*/result.json")
        if p.parent.name != LATEST and not p.parent.is_symlink()
    )


def find_run(arg: str | None, root: Path) -> Path:
    """The result.json of a run given by id, `latest` (also: none given) or a path to its folder
    or result.json."""
    hint = "a run id (a folder name in the reports folder), `latest`, or a path"
    if arg is None or arg == LATEST:
        runs = run_dirs(root)
        pointer = root / LATEST
        if pointer.is_file() and not pointer.is_symlink():
            name = pointer.read_bytes()[:MAX_ID_BYTES].decode("utf-8", "replace").strip()
            if name and "/" not in name and (root / name / "result.json").is_file():
                return root / name / "result.json"
        if not runs:
            raise InputError("no runs found", file=root, hint="gameday run first")
        return runs[-1] / "result.json"
    path = Path(arg)
    if not path.exists() and "/" not in arg and (root / arg).is_dir():
        path = root / arg
    if path.is_dir():
        path = path / "result.json"
    if not path.exists():
        raise InputError(f"no such run: {arg!r}", file=root, hint=hint)
    return path  # a device or FIFO is refused by the reader, which names it


def copy_reports(run_dir: Path, targets: dict[str, Path | None]) -> None:
    """Copy run_dir's files (junit.xml, result.json, report.html: the keys) to the paths given,
    making their parent folders; a path that is the run's own file already (through
    reports/latest) is left as it is. InputError names a path that cannot be written."""
    for name, dest in targets.items():
        if dest is None:
            continue
        try:
            if dest.is_dir():
                raise InputError("is a folder, not a file", file=dest, hint="name a file")
            if dest.exists() and os.path.samefile(run_dir / name, dest):
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run_dir / name, dest)
        except OSError as exc:
            raise InputError(
                f"cannot write {name} here: {exc.strerror or exc}",
                file=dest,
                hint=f"the run's own copy is in {run_dir}",
            ) from None
