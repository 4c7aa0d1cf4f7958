"""The start-up scenarios and the stray GPU process on a local lab whose engines speak vLLM
0.33.0 (inventories/local-vllm033.yaml): the per_vllm."0.33" sections are what pass there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import gameday

pytestmark = pytest.mark.e2e
LAB = "inventories/local-vllm033.yaml"
SCENARIOS = [
    "scenarios/context-window-overflow.yaml",
    "scenarios/kv-cache-shortage.yaml",
    "scenarios/tp-mismatch.yaml",
    "scenarios/service-name-collision.yaml",
    "scenarios/stray-gpu-process.yaml",
    "scenarios/cuda-graph-capture-oom.yaml",  # with the graph estimate turned off
]


def test_they_pass_on_a_033_lab_with_their_per_vllm_sections(tmp_path: Path) -> None:
    p = gameday("run", *SCENARIOS, "--lab", LAB, "--reports", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(((tmp_path / "latest").resolve() / "result.json").read_text())
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert {k: s["verdict"] for k, s in by_id.items()} == dict.fromkeys(by_id, "passed")
    per_vllm = {k: [n for n in s["notes"] if "per_vllm.0.33" in n] for k, s in by_id.items()}
    assert per_vllm["kv-cache-shortage"][0] == (
        "vLLM 0.33 lab: runs its own expect, hints, recover (per_vllm.0.33)"
    )
    assert (
        per_vllm["service-name-collision"][0]
        == "vLLM 0.33 lab: runs its own expect (per_vllm.0.33)"
    )
    assert (
        per_vllm["stray-gpu-process"][0]
        == "vLLM 0.33 lab: runs its own expect, inject (per_vllm.0.33)"
    )
    assert (
        per_vllm["cuda-graph-capture-oom"][0]
        == "vLLM 0.33 lab: runs its own expect, inject, recover (per_vllm.0.33)"
    )
    assert per_vllm["context-window-overflow"] == per_vllm["tp-mismatch"] == []  # unchanged
    # 0.33 reads VLLM_PORT after the weights and the KV cache: it fails as late as the shortage
    assert 90 < by_id["service-name-collision"]["time_to_fail_s"] < 300
    assert 90 < by_id["kv-cache-shortage"]["time_to_fail_s"] < 300
    assert by_id["tp-mismatch"]["time_to_fail_s"] < 30
