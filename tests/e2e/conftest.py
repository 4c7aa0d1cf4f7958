from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def gameday(
    *args: str, timeout: float = 600, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process; `env` adds to (or overrides) this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | (env or {}),
    )


def inventory(tmp_path: Path, address: str, **replace: str) -> Path:
    text = (ROOT / "inventories" / "local.yaml").read_text()
    text = text.replace("127.0.77.10", address).replace("name: local", "name: test")
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / "inventory.yaml"
    p.write_text(text)
    return p


@pytest.fixture
def lab_down_after() -> Iterator[list[Path]]:
    """Inventories registered here are taken down after the test, whatever happened."""
    invs: list[Path] = []
    yield invs
    for inv in invs:
        gameday("lab", "down", "--lab", str(inv), timeout=60)
