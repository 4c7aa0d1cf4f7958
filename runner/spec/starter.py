"""What `gameday init` writes into a team's repository: a configuration, the lab, an example
scenario whose recovery is a script of the team's, the script, and CI jobs that run them.

The files come from the package (runner/spec/starter_files, and the packaged local lab), so a
new repository needs nothing but an installed gameday. Nothing is overwritten unless asked: an
existing file is the team's own work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path, PurePosixPath

from runner.errors import InputError
from runner.spec.config import builtin_lab

LAB_HEADER = (
    "# The team's lab (written by `gameday init`: a copy of the local lab that ships with\n"
    "# gameday, yours to edit; docs/inventories.md). gameday.toml names it as the default --lab.\n"
)


@dataclass(frozen=True)
class StarterFile:
    """One file `init` writes: where (relative to the folder), its text, and whether it runs."""

    path: PurePosixPath
    text: str
    executable: bool = False


def _data(name: str) -> str:
    return (files("runner") / "spec" / "starter_files" / name).read_text(encoding="utf-8")


def starter_files() -> list[StarterFile]:
    """The files, in the order they are written and listed."""
    return [
        StarterFile(PurePosixPath("gameday.toml"), _data("gameday.toml")),
        StarterFile(
            PurePosixPath("gameday/lab.yaml"),
            LAB_HEADER + builtin_lab().read_text(encoding="utf-8"),
        ),
        StarterFile(
            PurePosixPath("gameday/scenarios/example-model-typo.yaml"),
            _data("example-model-typo.yaml"),
        ),
        StarterFile(PurePosixPath("gameday/scripts/set-model.sh"), _data("set-model.sh"), True),
        StarterFile(PurePosixPath(".github/workflows/gameday.yml"), _data("github-actions.yml")),
        StarterFile(PurePosixPath("gameday/ci/gitlab-ci.yml"), _data("gitlab-ci.yml")),
    ]


def write_starter(folder: Path, force: bool = False) -> list[Path]:
    """Write the starter files into `folder`; the paths written. InputError (nothing written)
    when any of them exists and `force` is False, or when one cannot be written."""
    todo = [(folder / Path(f.path), f) for f in starter_files()]
    taken = [str(f.path) for dest, f in todo if dest.exists() or dest.is_symlink()]
    if taken and not force:
        raise InputError(
            f"{len(taken)} of the files `init` writes already exist: {', '.join(taken)}",
            file=folder,
            hint="nothing was written; `gameday init --force` overwrites them",
        )
    written: list[Path] = []
    for dest, f in todo:
        try:
            if dest.is_dir():
                raise IsADirectoryError(21, "is a folder")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(f.text, encoding="utf-8")
            if f.executable:
                os.chmod(dest, 0o755)
        except OSError as exc:
            raise InputError(
                f"cannot write: {exc.strerror or exc}",
                file=dest,
                hint="run `gameday init` in a folder you can write",
            ) from None
        written.append(dest)
    return written
