"""Where the programs a lab starts are found.

The project's own programs (`vllm-lab`, `gameday`) are taken from the running interpreter's
environment: the console script in the interpreter's `bin/` directory, or `python -m <module>` when
the project runs from a checkout without its scripts installed. They are never looked up on PATH:
a copy installed elsewhere (another venv, a global install) would be a different version, and
finding it by luck hides a missing install step on a new machine.

Other programs (`prometheus`, `prometheus-node-exporter`, `ansible-playbook`) are looked up beside
the interpreter first (ansible is a Python dependency), then on PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

# console script -> the module that `python -m` runs for it (pyproject's [project.scripts])
PROJECT_PROGRAMS: dict[str, str] = {"vllm-lab": "labengine", "gameday": "runner.cli"}


def interpreter_bin() -> Path:
    """The running interpreter's scripts directory. Not resolved through symlinks: a venv's
    `bin/python` is a link to the base interpreter, and the venv's scripts sit beside the link."""
    return Path(sys.executable).parent


def project_argv(name: str) -> list[str]:
    """The argv prefix that starts the project's program `name` from this interpreter's
    environment."""
    module = PROJECT_PROGRAMS[name]
    script = interpreter_bin() / name
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", module]


def resolve_command(name: str) -> str | None:
    """A program other than the project's own: beside this interpreter, then on PATH, or a path
    as given."""
    beside = interpreter_bin() / name
    if "/" not in name and beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    if "/" in name and Path(name).is_file():
        return name
    return None


def command_argv(command: Sequence[str]) -> list[str] | None:
    """`command` with its program made absolute: the project's own from this interpreter's
    environment, others through `resolve_command`. None when the program is not installed."""
    if not command:
        return None
    head, *rest = command
    if head in PROJECT_PROGRAMS:
        return [*project_argv(head), *rest]
    found = resolve_command(head)
    return None if found is None else [found, *rest]
