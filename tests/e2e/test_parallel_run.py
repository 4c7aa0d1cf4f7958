"""`gameday run --parallel 2` on the local lab: two isolated instances, the same verdicts as a
serial run, one merged report, both instances taken down afterwards."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.support.cli import ROOT, gameday

pytestmark = pytest.mark.e2e
FAST = ["context-window-overflow", "tp-mismatch", "service-name-collision"]


def test_parallel_two_gives_one_report_with_the_same_verdicts(tmp_path: Path) -> None:
    files = [str(ROOT / "scenarios" / f"{s}.yaml") for s in FAST]
    state = {"GAMEDAY_STATE_DIR": str(tmp_path / "state")}
    r = gameday("run", *files, "--parallel", "2", "--reports", str(tmp_path), "--json", env=state)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads(r.stdout)
    assert result["lab"]["instances"] == 2
    assert [s["id"] for s in result["scenarios"]] == FAST  # in the order given
    assert {s["verdict"] for s in result["scenarios"]} == {"passed"}
    assert {s["lab"] for s in result["scenarios"]} == {"local", "local-p1"}
    # one run folder, and `latest` pointing at it
    assert [p.parent.name for p in tmp_path.glob("*/report.html") if not p.parent.is_symlink()] == [
        result["run_id"]
    ]
    assert (tmp_path / "latest").resolve() == tmp_path / result["run_id"]
    # both instances are down: nothing listens on either's serving address
    for addr in ("127.0.77.10", "127.1.77.10"):
        with socket.socket() as s:
            assert s.connect_ex((addr, 8000)) != 0, addr
