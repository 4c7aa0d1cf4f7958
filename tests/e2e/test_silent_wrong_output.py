"""silent-wrong-output on the embedded local lab: the baseline's setup serves the Jamba model on the
fixed build and records the correctness reference; the probe catches the wrapped state index by
request id against that reference, lowering the utilisation masks it, the fixed build restores.
A run killed once its setup is applied is put back by `gameday cleanup`."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, gameday, inventory

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
    assert by_name["baseline: setup"]["observed"] == (
        "set_args on serving: model gameday-lab/jamba-hybrid-1b; "
        "set_env on serving: VLLM_LAB_BUILD=fixed"
    )
    probe = "correctness under load (1024 requests, 16 at a time)"
    recorded = by_name[f"baseline: {probe}"]["observed"]
    assert "as its own serial pass, kept as this run's reference (cmpl-gameday-ref-" in recorded
    setup = [e["event"] for e in sc["timeline"] if e["kind"] == "setup"]
    assert [e.split(":")[0] for e in setup] == ["setup", "setup"]
    # healthy by every other probe while the correctness probe shows the fault
    assert by_name["expect: GET /health"]["observed"] == "HTTP 200"
    caught = by_name[f"expect: {probe}"]["observed"]
    m = re.match(
        r"\d+ of 1024 requests diverged; the first after \d+ requests of this pass, (\d+) of "
        r"the run's correctness requests to this engine \(\d+ from earlier probes, 0 from this "
        r"one's serial pass\); ",
        caught,
    )
    assert m, caught
    # the injected engine's buffer wraps at slot 1118 (README): its 1119th request is the first
    # wrong one (the inference probes of each poll round take slots too); the first pass of 1024
    # cannot reach it
    needed = int(m.group(1))
    assert 1024 < needed <= 1119, caught
    ref = r"cmpl-gameday-ref-[0-9a-f]{8}-\d+"
    assert re.search(
        rf"cmpl-gameday-[0-9a-f]{{8}}-\d+: '.+' \(reference '.+' from {ref}, logprob gap ", caught
    )
    at_baseline = r"the reference recorded at baseline \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.search(rf"; compared with {at_baseline} \({ref} \.\. {ref}\)$", caught)
    assert re.match(at_baseline, by_name[f"verify: {probe}"]["expected"].split(" as ", 1)[1])
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
    for name in ("report.md", "report.html"):
        report = (run_dir / name).read_text()
        assert "cmpl-gameday-ref-" in report and "logprob gap" in report and "masks" in report
        assert "compared with the reference recorded at baseline" in report


def test_a_run_killed_after_its_setup_is_put_back_by_cleanup(
    tmp_path: Path, lab_down_after: list[Path]
) -> None:
    inv = inventory(tmp_path, "127.0.78.54")
    lab_down_after.append(inv)
    assert gameday("lab", "up", "--lab", str(inv)).returncode == 0
    lab = LocalLab(load_inventory(inv))
    base = lab.baseline_config("serving")
    argv = ["run", "scenarios/silent-wrong-output.yaml", "--lab", str(inv)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", *argv, "--reports", str(tmp_path / "r")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "baseline: setup" in line:
            break
    deadline = time.monotonic() + 60
    while lab.config("serving") == base:  # the setup's first change is applied
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no cleanup can run
    proc.wait()
    assert lab.config("serving").args[0] == "gameday-lab/jamba-hybrid-1b"
    p = gameday("run", "scenarios/silent-wrong-output.yaml", "--lab", str(inv))
    assert p.returncode == 3 and "gameday cleanup" in p.stderr
    p = gameday("cleanup", "--lab", str(inv))
    assert p.returncode == 0, p.stderr
    assert lab.config("serving") == base  # the lab's baseline, not the setup's model
    deadline = time.monotonic() + 60
    while not lab.states()["serving"].ready:
        assert time.monotonic() < deadline, lab.states()["serving"]
        time.sleep(0.2)
