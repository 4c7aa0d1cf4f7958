"""silent-wrong-output on the embedded local lab: the correctness probe catches the wrapped state
index by request id, lowering the utilisation masks it, the fixed engine build restores."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import gameday

pytestmark = pytest.mark.e2e


def test_silent_wrong_output_passes_with_its_masking_step(tmp_path: Path) -> None:
    p = gameday(
        "run",
        "scenarios/silent-wrong-output.yaml",
        "--lab",
        "inventories/local.yaml",
        "--reports",
        str(tmp_path),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = (tmp_path / "latest").resolve()
    result = json.loads((run_dir / "result.json").read_text())
    (sc,) = result["scenarios"]
    assert sc["verdict"] == "passed"
    by_name = {a["name"]: a for a in sc["assertions"]}
    # healthy by every other probe while the correctness probe shows the fault
    assert by_name["expect: GET /health"]["observed"] == "HTTP 200"
    caught = by_name["expect: correctness under load (1024 requests, 16 at a time)"]["observed"]
    assert re.match(r"\d+ of 1024 requests diverged; the first after \d+ requests; ", caught)
    assert re.search(r"cmpl-gameday-[0-9a-f]{8}-\d+: '.+' \(reference '.+', logprob gap ", caught)
    step = "recover 1: Lower --gpu-memory-utilization to 0.2"
    assert by_name[f"{step}: masks the symptom (the probes pass)"]["verdict"] == "passed"
    back = f"{step}: masks, the fault is back once the original setting is restored"
    assert by_name[back]["verdict"] == "passed"
    assert [n for n in sc["notes"] if n.startswith("MASKS")] == [
        "MASKS - Lower --gpu-memory-utilization to 0.2: the probes passed after it and the fault "
        "came back once the original setting was restored; it hides the symptom, the cause is "
        "still there"
    ]
    fixed = "recover 2: The fixed engine build (64-bit state index, decode never before prefill)"
    assert by_name[f"{fixed}: restores service"]["verdict"] == "passed"
    report = (run_dir / "report.md").read_text()
    assert "cmpl-gameday-" in report and "logprob gap" in report and "masks" in report
