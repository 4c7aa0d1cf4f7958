"""The engine's runtime failure mechanics, without a lab."""

from __future__ import annotations

import re
from pathlib import Path

from labengine.core import DEEPGEMM_800, NCCL_REMOTE_ERROR, TRITON_800, heartbeat_line
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]


def test_messages_match_the_seeds() -> None:
    assert DEEPGEMM_800.endswith(
        "/jit/handle.hpp:154): 800 (CUDA_ERROR_NOT_PERMITTED, operation not permitted)"
    )
    assert TRITON_800 == "RuntimeError: Triton Error [CUDA]: operation not permitted"
    # vLLM's pynccl words NCCL's error string alone, without PyTorch's version suffix
    assert NCCL_REMOTE_ERROR == (
        "RuntimeError: NCCL error: remote process exited or there was a network error"
    )


def test_heartbeat_line_matches_the_scenario() -> None:
    sc = load_scenario(ROOT / "scenarios" / "head-only-restart.yaml").scenario
    rx = sc.expect.elsewhere[0].in_order[0].regex
    assert re.search(rx, heartbeat_line(1))
    assert heartbeat_line(1).startswith("[rank1]:[W")
