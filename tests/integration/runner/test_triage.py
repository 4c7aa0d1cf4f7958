"""Triage recognises the seed's 0.19 logs and the 0.33 wording, and says so when it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.seedlogs import HEALTHY, SEED_019

ROOT = Path(__file__).resolve().parents[3]


def test_cli_exit_codes(tmp_path: Path) -> None:
    log = tmp_path / "prev.log"
    log.write_text(SEED_019["context-window-overflow"])
    ok = subprocess.run(
        [sys.executable, "-m", "runner.cli", "triage", str(log)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and "context-window-overflow" in ok.stdout
    none = subprocess.run(
        [sys.executable, "-m", "runner.cli", "triage", "-"],
        cwd=ROOT,
        input=HEALTHY,
        capture_output=True,
        text=True,
    )
    assert none.returncode == 1 and "no known failure" in none.stdout
