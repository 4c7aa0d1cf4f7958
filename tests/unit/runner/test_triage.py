"""Triage recognises the seed's 0.19 logs and the 0.33 wording, and says so when it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner.scenario import discover, load_scenario
from runner.triage import triage

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]

# kubectl logs --previous excerpts as the seed shows them (vLLM 0.19.1), one line per record
SEED_019 = {
    "kv-cache-shortage": """\
(EngineCore pid=81) INFO 04-19 10:59:54 [gpu_worker.py:436] Available KV cache memory: 0.18 GiB
(EngineCore pid=81) ERROR 04-19 10:59:54 [core.py:1108] EngineCore failed to start.
(EngineCore pid=81) ValueError: To serve at least one request with the models's max seq len (16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.18 GiB). Based on the available memory, the estimated maximum model length is 976. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
""",
    "context-window-overflow": """\
(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
(APIServer pid=1)   Value error, User-specified max_model_len (131072) is greater than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan.
""",
    "tp-mismatch": """\
(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig
(APIServer pid=1)   Value error, World size (2) is larger than the number of available GPUs (1) in this node. If this is intentional and you are using:
(APIServer pid=1) - ray, set '--distributed-executor-backend ray'.
(APIServer pid=1) - multiprocessing, set '--nnodes' appropriately.
""",
    "service-name-collision": """\
(APIServer pid=1) WARNING 04-19 10:45:24 [envs.py:1744] Unknown vLLM environment variable detected: VLLM_SERVICE_HOST
(EngineCore pid=81) ERROR 04-19 10:45:43 [core.py:1108] EngineCore failed to start.
(EngineCore pid=81) ValueError: VLLM_PORT 'tcp://10.100.123.45:8000' appears to be a URI. This may be caused by a Kubernetes service discovery issue,check the warning in: https://docs.vllm.ai/en/stable/serving/env_vars.html
""",
}

# the same failures in 0.33 wording, with container-runtime timestamps in front (kubectl --timestamps)
V033 = {
    "kv-cache-shortage": "2026-11-29T07:00:01.123456789Z (EngineCore_DP0 pid=90) ValueError: To serve at least one request with the model's max seq len (16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.18 GiB). Based on the available memory, the estimated maximum model length is 960. Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory.html for more details.\n",
    "tp-mismatch": "2026-11-29T07:00:01Z Value error, Tensor parallel size (2) cannot be larger than the number of available GPUs (1).\n",
    "service-name-collision": "2026-11-29T07:00:01Z (EngineCore_DP0 pid=90) ValueError: VLLM_PORT 'tcp://172.20.0.5:8000' appears to be a URI. This may be caused by a Kubernetes service discovery issue,check the warning in: https://docs.vllm.ai/en/latest/configuration/env_vars.html\n",
}

HEALTHY = """\
(EngineCore pid=81) INFO 04-19 10:50:43 [kv_cache_utils.py:1319] GPU KV cache size: 49,696 tokens
(APIServer pid=1) INFO 04-19 10:50:50 [launcher.py:37] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
"""
UNRELATED = """\
(EngineCore pid=81) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 22.18 GiB of which 3.47 GiB is free.
"""


@pytest.mark.parametrize(("expected", "text"), [*SEED_019.items(), *V033.items()])
def test_recognises(expected: str, text: str) -> None:
    found = [f.scenario.scenario.metadata.id for f in triage(text, SCEN)]
    assert found == [expected]


@pytest.mark.parametrize("text", [HEALTHY, UNRELATED, ""])
def test_no_known_failure(text: str) -> None:
    assert triage(text, SCEN) == []


def test_phase_and_recovery_in_finding() -> None:
    f = triage(SEED_019["kv-cache-shortage"], SCEN)[0]
    assert f.phase.value == "kv_cache_check"
    assert f.fixes and f.shortcuts


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
