"""The project's own programs come from the running interpreter's environment, never from PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runner.programs import command_argv, project_argv, resolve_command


def _decoy(tmp_path: Path, name: str) -> Path:
    bin_dir = tmp_path / "elsewhere"
    bin_dir.mkdir(exist_ok=True)
    p = bin_dir / name
    p.write_text("#!/bin/sh\necho decoy\n")
    p.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("name", ["vllm-lab", "gameday"])
def test_a_copy_earlier_on_path_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("PATH", f"{_decoy(tmp_path, name)}{os.pathsep}{os.environ['PATH']}")
    argv = project_argv(name)
    assert not argv[0].startswith(str(tmp_path))
    assert Path(argv[0]).parent == Path(sys.executable).parent


def test_without_installed_scripts_python_m_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert project_argv("vllm-lab") == [str(tmp_path / "python"), "-m", "labengine"]


def test_other_programs_from_path_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_decoy(tmp_path, "some-exporter")))
    assert resolve_command("some-exporter") == str(tmp_path / "elsewhere" / "some-exporter")
    assert command_argv(["no-such-program-here", "x"]) is None
    assert command_argv([]) is None
