"""Triage recognises the EKS start-failure write-up's 0.19 logs and the 0.33 wording, and says so
when it does not."""

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


def test_a_reader_that_stops_early_does_not_change_the_exit_code(tmp_path: Path) -> None:
    """`gameday triage x.log | head -1`: the pipe closes before triage writes; its exit code is
    still triage's own (0: recognised), for the text and for --json."""
    log = tmp_path / "prev.log"
    log.write_text(SEED_019["context-window-overflow"])
    for extra in ([], ["--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "triage", *extra, str(log)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the first line
        stderr = proc.stderr.read()
        assert (proc.wait(timeout=60), stderr) == (0, b""), extra


def test_the_scale_benchmark_prints_its_figures() -> None:
    """bench/triage_scale.py (a million lines by default) on a small log: a line of figures per
    size, the failures at the log's end found, and whether the largest met the goals."""
    p = subprocess.run(
        [sys.executable, "bench/triage_scale.py", "--lines", "3000,6000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:1] in (["3000"], ["6000"])]
    assert len(rows) == 2
    for row in rows:
        seconds, peak, code = float(row[2]), float(row[3]), int(row[4])
        assert 0 < seconds < 60 and 10 < peak < 2000 and code == 0
        assert "kv-cache-shortage," in row and "head-only-restart," in row
    assert "largest:" in p.stdout and "met" in p.stdout
