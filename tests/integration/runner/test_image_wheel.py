"""The wheel `gameday lab build` packs from an installed gameday is one pip installs as the lab
image's Dockerfile does: by name, from a folder, with no index and no dependencies."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from runner.labs.compose.build import wheel_from_installed
from tests.support.fakedist import PACKAGE, fake_install


def test_the_packed_wheel_installs_offline(tmp_path: Path) -> None:
    wheel = wheel_from_installed(fake_install(tmp_path / "site"), tmp_path / "wheels")
    target = tmp_path / "image"
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet"]
    p = subprocess.run(
        [*pip, "--find-links", str(wheel.parent), "--target", str(target), "gameday"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert (target / "labengine" / "cli.py").read_text() == PACKAGE["labengine/cli.py"]
    [installed] = importlib.metadata.distributions(path=[str(target)])
    assert installed.version == "9.9.1"
    assert installed.entry_points.names == {"vllm-lab"}
