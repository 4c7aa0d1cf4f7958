"""The scenarios against the real `vllm serve`: vLLM 0.32.0's CPU build serving the project's
tiny model (inventories/local-realvllm.yaml, `make realvllm-env`), in real time. What passes
here is what a team's vLLM does, not what the lab engine says it would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import ROOT, gameday, realvllm_or_skip

pytestmark = [pytest.mark.e2e, pytest.mark.realvllm]
LAB = "inventories/local-realvllm.yaml"
SCENARIOS = [
    "scenarios/context-window-overflow.yaml",
    "scenarios/kv-cache-shortage.yaml",
    "scenarios/service-name-collision.yaml",
    "scenarios/tp-mismatch.yaml",
    "scenarios/engine-core-death.yaml",
    "scenarios/missing-chat-template.yaml",
    "scenarios/engine-core-hang.yaml",
]
# what only real vLLM on the CPU shows: its worker process (the stand-in has none), the CPU
# worker's budget line, and the generated model's answer through vLLM's own sampler
REAL = {
    "context-window-overflow": ["(Worker pid=", "[default_loader.py:"],
    "kv-cache-shortage": ["(Worker pid=", "[cpu_worker.py:", "GiB for KV cache on node 0"],
    "service-name-collision": ["(Worker pid=", "WorkerProc failed to start"],
    "tp-mismatch": ["Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers"],
    "engine-core-death": ["vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered"],
    # real vLLM's own refusal body (the answer check below shows the model is the real one)
    "missing-chat-template": ['"type":"BadRequestError","param":null,"code":400}'],
    # /health 200 from the real API server while its stopped engine core answers nothing
    "engine-core-hang": ["no answer within 10.0 s (a hang, not an error)"],
}
ANSWER = "'This tiny test model is ready to serve.'"


def test_the_scenarios_pass_against_real_vllm(tmp_path: Path) -> None:
    """One scenario at a time: real vLLM serves on the CPU, so two lab instances on 2 cores slow
    each other's answers (p50 6 to 8 s instead of 2.6 s) until the scenarios' load sees errors
    after the restore, which is not what a team's vLLM does."""
    realvllm_or_skip()
    p = gameday("run", *SCENARIOS, "--lab", LAB, "--reports", str(tmp_path), timeout=2400)
    assert p.returncode == 0, p.stdout + p.stderr
    run = (tmp_path / "latest").resolve()
    result = json.loads((run / "result.json").read_text())
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert {k: s["verdict"] for k, s in by_id.items()} == dict.fromkeys(REAL, "passed")
    # the lab's share of the scenarios' 10 requests/s (inventory load_scale 0.3)
    loads = {
        k: (s["impact"]["rate"], s["impact"]["load_scale"])
        for k, s in by_id.items()
        if s.get("impact")
    }
    assert loads == {"kv-cache-shortage": (3.0, 0.3), "engine-core-death": (3.0, 0.3)}
    platform = {k: [n for n in s["notes"] if "(per_platform.cpu)" in n] for k, s in by_id.items()}
    assert platform == {
        "context-window-overflow": [],  # the same lines on either platform
        "kv-cache-shortage": [
            "vLLM on CPU: runs its own expect, hints, inject, recover (per_platform.cpu)"
        ],
        "service-name-collision": ["vLLM on CPU: runs its own expect (per_platform.cpu)"],
        "tp-mismatch": ["vLLM on CPU: runs its own expect, hints, recover (per_platform.cpu)"],
        "engine-core-death": [],
        "missing-chat-template": ["vLLM on CPU: runs its own inject (per_platform.cpu)"],
        "engine-core-hang": [],
    }
    report = (run / "report.md").read_text()
    sections = report.split("\n## ")[1:]
    for sid, lines in REAL.items():
        (section,) = [s for s in sections if s.startswith(sid + ":")]
        for line in lines:
            assert line in section, (sid, line)  # the evidence is real vLLM's own output
        assert ANSWER in section  # the baseline's and the verification's answers


def test_an_inventory_used_before_its_environment_is_set_up_says_how(tmp_path: Path) -> None:
    """A copy of the real-vLLM inventory whose engine is not there yet: one message naming the
    missing program and the command that sets it up, the lab's exit code, nothing started."""
    (tmp_path / "inventories").mkdir()
    shutil.copy(ROOT / LAB, tmp_path / "inventories" / "real.yaml")
    env = {"GAMEDAY_STATE_DIR": str(tmp_path / "state")}
    p = gameday("lab", "up", "--lab", str(tmp_path / "inventories" / "real.yaml"), env=env)
    assert p.returncode == 3, p.stdout + p.stderr
    missing = tmp_path / ".venv-vllm" / "bin" / "vllm"
    assert f"engine command '{missing}'" in p.stderr
    assert "is not installed" in p.stderr
    assert "set it up: make realvllm-env" in p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "state" / "local-realvllm" / "supervisor.sock").exists()
