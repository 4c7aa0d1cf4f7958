"""Paths as a report shows them: relative to the team's repository, so that JUnit's `file=`, a
runbook and result.json name the file as the repository does, not as one CI machine laid it out.

The repository is the folder of the configuration that applies where gameday runs (gameday.toml,
or a pyproject.toml with [tool.gameday]), else the nearest folder above with `.git`, else the
current folder. A file of gameday's own (a built-in scenario) is named as in gameday's package
(`runner/builtin_scenarios/...`); any other file outside the repository keeps its absolute path,
since no shorter name would find it. Documented in docs/reports.md 'Paths in reports'.
"""

from __future__ import annotations

import os
from pathlib import Path

import runner
from runner.spec.config import find_config
from runner.spec.usersteps import is_url

PACKAGE_PARENT = Path(runner.__file__).parent.parent  # where `runner/` is installed


def repository_root(cwd: Path | None = None) -> Path:
    """The folder a report's paths are relative to (see the module's docstring)."""
    cwd = Path(os.path.abspath(cwd or Path.cwd()))
    found = find_config(cwd)
    if found is not None:
        return Path(os.path.abspath(found[0].parent))
    return next((d for d in (cwd, *cwd.parents) if (d / ".git").exists()), cwd)


def shown(path: Path, root: Path) -> str:
    """`path` as a report names it: relative to `root` (POSIX separators), else to gameday's
    package for its own files, else absolute."""
    full = Path(os.path.abspath(path))  # links kept: a checkout's built-ins are a link
    # gameday's own files first: a team's .venv inside its repository holds the package, and
    # `.venv/lib/python3.11/site-packages/runner/...` is no file of the repository's
    if full.is_relative_to(PACKAGE_PARENT / "runner"):
        return full.relative_to(PACKAGE_PARENT).as_posix()
    if full.is_relative_to(root):
        return full.relative_to(root).as_posix()
    return str(full)


def shown_runbook(ref: str, scenario: Path, root: Path) -> str:
    """A recovery step's `runbook:` (a URL, or a path relative to its scenario's folder) as a
    report names it: a URL as written, a path relative to the repository."""
    if is_url(ref):
        return ref
    file, sep, anchor = ref.partition("#")
    return shown(scenario.parent / file, root) + sep + anchor
