"""The CLI in a child process, inventory variants, and the Docker engine or a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def variant(source: Path, tmp_path: Path, replace: dict[str, str], name: str | None = None) -> Path:
    """A copy of an inventory in tmp_path with each `old` text replaced by its `new` (each must be
    there); relative paths in it must be made absolute through `replace`."""
    text = source.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / (name or source.name)
    p.write_text(text)
    return p


def inventory(tmp_path: Path, address: str, **replace: str) -> Path:
    """The local lab's inventory, its serving node on `address`, under the lab name `test`."""
    base = {"127.0.77.10": address, "name: local": "name: test"}
    local = ROOT / "inventories" / "local.yaml"
    return variant(local, tmp_path, base | replace, name="inventory.yaml")


def docker_or_skip() -> Any:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except Exception as exc:
        if os.environ.get("GAMEDAY_REQUIRE_DOCKER") == "1":
            pytest.fail(f"Docker is required here (GAMEDAY_REQUIRE_DOCKER=1) but: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
