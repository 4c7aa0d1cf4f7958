"""The lab engine's message texts, env names and start-up checks, as vLLM 0.19.1 and 0.33.0's
source words them (vllm/v1/core/kv_cache_utils.py, config/model.py, config/parallel.py,
entrypoints/cli/serve.py, envs.py, v1/engine/core.py and utils.py)."""

from __future__ import annotations

import argparse
import io

import pytest

from labengine import apiserver
from labengine.logs import Frame, VllmLog
from labengine.tracebacks import process_died
from vllmfacts import envs, wording
from vllmfacts.gpu import node_gpus
from vllmfacts.models import resolve
from vllmfacts.wording import Era

AWQ = "Qwen/Qwen2.5-14B-Instruct-AWQ"  # 40 attention heads
SUFFIX = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def test_kv_shortage_without_a_positive_estimate_leaves_it_out() -> None:
    msg = wording.kv_shortage(Era.V0_19, 4096, 3 * 2**30, 2**29, 0)
    assert msg == (
        "To serve at least one request with the models's max seq len (4096), (3.0 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (0.5 GiB). Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine. " + SUFFIX
    )


def test_kv_shortage_033() -> None:
    assert wording.kv_shortage(Era.V0_33, 16384, 3 * 2**30, 2**29, 960) == (
        "To serve at least one request with the model's max seq len (16384), (3.0 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (0.5 GiB). Based on the "
        "available memory, the estimated maximum model length is 960. Try increasing "
        "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
        "decreasing `max_model_len` when initializing the engine. " + SUFFIX
    )


@pytest.mark.parametrize(
    ("era", "middle"),
    [
        (Era.V0_19, "when initializing the engine. "),
        (
            Era.V0_33,
            "when initializing the engine (this flag also controls CPU memory reservation on "
            "the CPU backend, despite its name). ",
        ),
    ],
)
def test_no_kv_memory(era: Era, middle: str) -> None:
    assert wording.no_kv_memory(era) == (
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        + middle
        + SUFFIX
    )


def test_long_max_model_len_error_and_warning() -> None:
    head = (
        "User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json)."
    )
    caution = (
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
        "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to "
        "nan. If the model uses absolute position encoding, positions exceeding "
        "derived_max_model_len will cause a CUDA array out-of-bounds error."
    )
    key, derived = "max_position_embeddings", 32768.0
    assert wording.long_max_model_len(131072, key, derived) == (
        f"{head} To allow overriding this maximum, set the env var "
        f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {caution}"
    )
    assert wording.long_max_model_len_allowed(131072, key, derived) == f"{head} {caution}"
    assert "model_max_length=65536 in" in wording.long_max_model_len(131072, key, derived, 65536)


def test_headless_and_group_leader_lines() -> None:
    assert wording.headless_launch(Era.V0_33, "10.0.0.5", 29501) == (
        "Launching vLLM (v0.33.0) headless multiproc executor, with head node address "
        "10.0.0.5:29501 for torch.distributed process group."
    )
    assert wording.dp_group_leader(0, "10.0.0.5", "10.0.0.5", 2, 1) == (
        "DP group leader: node_rank=0, node_rank_within_dp=0, master_addr=10.0.0.5, "
        "mq_connect_ip=10.0.0.5 (local), world_size=2, local_world_size=1"
    )


def test_engine_init_failed_per_era() -> None:
    prefix = "Engine core initialization failed. See root cause above. Failed core proc(s): "
    assert wording.engine_init_failed(Era.V0_19, 1) == prefix + "{}"
    assert wording.engine_init_failed(Era.V0_33, 1) == prefix + "{'EngineCore_DP0': 1}"


@pytest.mark.parametrize(
    ("value", "uri"),
    [
        ("tcp://10.100.1.2:8000", True),
        ("localhost:8000", True),  # urllib3 reads "localhost" as the scheme
        ("10.0.0.1:8000", False),  # a scheme starts with a letter
        ("my.host:8000", False),  # and has no dot
        ("eight", False),
    ],
)
def test_vllm_port_uri_as_urllib3_sees_it(value: str, uri: bool) -> None:
    with pytest.raises(envs.EnvError) as err:
        envs.vllm_port(Era.V0_19, {"VLLM_PORT": value})
    expected = (
        f"VLLM_PORT '{value}' appears to be a URI. This may be caused by a Kubernetes service "
        "discovery issue,check the warning in: https://docs.vllm.ai/en/stable/serving/env_vars.html"
        if uri
        else f"VLLM_PORT '{value}' must be a valid integer"
    )
    assert str(err.value) == expected


def test_vllm_port_integer_and_unset() -> None:
    assert envs.vllm_port(Era.V0_33, {"VLLM_PORT": "8001"}) == 8001
    assert envs.vllm_port(Era.V0_33, {}) is None


def test_env_names_per_era() -> None:
    env = {
        "VLLM_FLASH_ATTN_VERSION": "3",  # in neither era's envs.py
        "VLLM_USE_V1": "1",  # gone by 0.19
        "VLLM_ATTENTION_BACKEND": "FLASHINFER",  # gone by 0.19 (an --attention-backend flag)
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1",
        "VLLM_USE_FLASHINFER_MOE_FP8": "1",  # 0.19 only
        "VLLM_SERVICE_HOST": "10.0.0.1",
        "PATH": "/bin",
    }
    assert envs.unknown_names(Era.V0_19, env) == [
        "VLLM_FLASH_ATTN_VERSION",
        "VLLM_USE_V1",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_SERVICE_HOST",
    ]
    assert envs.unknown_names(Era.V0_33, env) == [
        "VLLM_FLASH_ATTN_VERSION",
        "VLLM_USE_V1",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_USE_FLASHINFER_MOE_FP8",
        "VLLM_SERVICE_HOST",
    ]
    assert (len(envs.known(Era.V0_19)), len(envs.known(Era.V0_33))) == (223, 303)


def _args(**over: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
        "distributed_executor_backend": None,
        "nnodes": 1,
    }
    return argparse.Namespace(**(base | over))


@pytest.mark.parametrize(
    ("over", "refused"),
    [
        ({"tensor_parallel_size": 2}, True),
        ({"pipeline_parallel_size": 2}, True),
        ({"tensor_parallel_size": 2, "distributed_executor_backend": "mp"}, False),
        ({"tensor_parallel_size": 2, "distributed_executor_backend": "ray"}, False),
        ({"tensor_parallel_size": 2, "nnodes": 2}, False),
        ({"tensor_parallel_size": 1}, False),
    ],
)
def test_world_size_check_only_when_vllm_picks_the_backend(
    over: dict[str, object], refused: bool
) -> None:
    out = io.StringIO()
    gpus = node_gpus({"GAMEDAY_GPU": "a10g"})
    if refused:
        with pytest.raises(apiserver._Failed):
            apiserver._check_world(_args(**over), gpus, Era.V0_19, VllmLog("APIServer", out))
        assert "Value error, World size (2) is larger than the number of available GPUs (1)" in (
            out.getvalue()
        )
    else:
        apiserver._check_world(_args(**over), gpus, Era.V0_19, VllmLog("APIServer", out))
        assert out.getvalue() == ""


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    out = io.StringIO()
    model = resolve(AWQ, None)
    with pytest.raises(apiserver._Failed):
        apiserver._check_heads(
            _args(tensor_parallel_size=3), model, Era.V0_19, VllmLog("APIServer", out)
        )
    lines = [ln.split(") ", 1)[1] for ln in out.getvalue().splitlines()]
    assert lines[-3:] == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
        "  Value error, Total number of attention heads (40) must be divisible by tensor "
        "parallel size (3). [type=value_error, input_value=ArgsKwargs((), {'model_config': "
        "ModelConfig(...), ...}), input_type=ArgsKwargs]",
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error",
    ]
    quiet = io.StringIO()
    apiserver._check_heads(
        _args(tensor_parallel_size=4), model, Era.V0_19, VllmLog("APIServer", quiet)
    )
    assert quiet.getvalue() == ""


def test_logged_exception_and_process_died_layout() -> None:
    out = io.StringIO()
    log = VllmLog("EngineCore_DP0", out)
    inner = [Frame("/v/core.py", 7, "f", "raise ValueError(x)")]
    log.logged_exception("core.py:1584", "EngineCore failed to start.", inner, "ValueError: x")
    log.process_died("EngineCore_DP0", process_died(Era.V0_33, inner), "ValueError: x")
    lines = [ln.split(") ", 1)[1] for ln in out.getvalue().splitlines()]
    heads = {ln[: len("ERROR 12-01 00:00:00 ")] for ln in lines[:5]}
    assert len(heads) == 1 and lines[0].startswith("ERROR ")
    assert [ln[len("ERROR 12-01 00:00:00 ") :] for ln in lines[:5]] == [
        "[core.py:1584] EngineCore failed to start.",
        "[core.py:1584] Traceback (most recent call last):",
        '[core.py:1584]   File "/v/core.py", line 7, in f',
        "[core.py:1584]     raise ValueError(x)",
        "[core.py:1584] ValueError: x",
    ]
    assert lines[5:] == [
        "Process EngineCore_DP0:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
        "    self.run()",
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run',
        "    self._target(*self._args, **self._kwargs)",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 1588, '
        "in run_engine_core",
        "    raise e",
        '  File "/v/core.py", line 7, in f',
        "    raise ValueError(x)",
        "ValueError: x",
    ]
