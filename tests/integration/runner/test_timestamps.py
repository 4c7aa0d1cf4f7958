"""The DeepGEMM crash write-up's trap: container logs in UTC, the host in KST (UTC+9). Read
naively the host's memory errors land 9 hours after the crash; on one UTC clock they are 18 hours
before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.seedlogs import CONTAINER, HOST

ROOT = Path(__file__).resolve().parents[3]


def test_cli(tmp_path: Path) -> None:
    (tmp_path / "c.log").write_text(CONTAINER)
    (tmp_path / "h.log").write_text(HOST)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "timeline",
            str(tmp_path / "c.log"),
            f"{tmp_path / 'h.log'}@Asia/Seoul",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "healthy" in lines[1] and "fatal error" in lines[2]
    bad = subprocess.run(
        [sys.executable, "-m", "runner.cli", "timeline", f"{tmp_path / 'h.log'}@Mars/Olympus"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "unknown time zone" in bad.stderr
