"""The project's own programs come from the running interpreter's environment, never from PATH."""

from __future__ import annotations

import os
import subprocess

import pytest

from runner.programs import command_argv


@pytest.mark.parametrize("name", ["vllm-lab", "gameday"])
def test_found_with_nothing_on_path(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    argv = command_argv([name, *([] if name == "gameday" else ["serve"]), "--help"])
    assert argv is not None
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ)
    assert out.returncode == 0, out.stderr
    assert "usage" in out.stdout.lower() + out.stderr.lower()
