"""The weights' fetch and load: their durations from the node's rates, the shard bar vLLM
prints (tqdm's format_meter with weight_utils._BAR_FORMAT), and VLLM_LAB_STORAGE_GIB_S."""

from __future__ import annotations

import argparse
import io

import pytest

from labengine import apiserver, loading
from labengine.core import CoreSettings, _load_weights
from labengine.logs import VllmLog
from vllmfacts.gpu import gpu_types
from vllmfacts.models import resolve
from vllmfacts.wording import Era

LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


@pytest.mark.parametrize(
    ("n", "total", "elapsed", "line"),
    [
        # each expected line is what tqdm 4.x's format_meter prints for the same figures
        (0, 29, 0.0, "0% Completed | 0/29 [00:00<?, ?it/s]"),
        (1, 29, 151.3, "3% Completed | 1/29 [02:31<1:10:36, 151.30s/it]"),
        (29, 29, 4381.0, "100% Completed | 29/29 [1:13:01<00:00, 151.07s/it]"),
        (3, 5, 2.5, "60% Completed | 3/5 [00:02<00:01,  1.20it/s]"),
        (1, 4, 0.4, "25% Completed | 1/4 [00:00<00:01,  2.50it/s]"),
    ],
)
def test_the_shard_bar_is_tqdms(n: int, total: int, elapsed: float, line: str) -> None:
    pct, rest = line.split("%", 1)
    expected = f"Loading safetensors checkpoint shards: {pct:>3}%{rest}"
    assert loading.progress_line(n, total, elapsed) == expected


def test_shards_come_from_the_index_else_from_5_gb_shards() -> None:
    assert loading.shard_count(resolve("Qwen/Qwen2.5-14B-Instruct-AWQ")) == 3  # its index
    assert loading.shard_count(resolve("meta-llama/Llama-3.1-8B-Instruct")) == 5  # its index
    # no index: 141,107,412,992 bytes of bf16 weights in shards of at most 5e9 bytes
    assert loading.shard_count(resolve(LLAMA_70B)) == 29


def test_storage_rate_is_read_from_the_lab_variable() -> None:
    assert loading.storage_gib_s({}) is None
    assert loading.storage_gib_s({"VLLM_LAB_STORAGE_GIB_S": "0.015"}) == 0.015


@pytest.mark.parametrize("raw", ["0", "-1", "fast", "nan", "inf", ""])
def test_a_storage_rate_not_a_positive_number_is_refused(raw: str) -> None:
    with pytest.raises(loading.StorageError) as exc:
        loading.storage_gib_s({"VLLM_LAB_STORAGE_GIB_S": raw})
    assert str(exc.value) == (
        f"VLLM_LAB_STORAGE_GIB_S={raw!r}: not a positive number (the node volume's read rate "
        "in GiB/s, e.g. 0.015)"
    )


def test_a_slow_volume_bounds_the_load_not_the_fetch() -> None:
    model = resolve(LLAMA_70B)
    h100 = gpu_types()["h100"]
    per_rank = model.loaded_bytes(2)
    assert per_rank == 70_553_706_496  # half of the bf16 checkpoint
    slow = loading.load_times(model, per_rank, h100, {"VLLM_LAB_STORAGE_GIB_S": "0.015"})
    # 65.708 GiB at the H100 node's 0.5 GiB/s fetch, then at the volume's 0.015 GiB/s
    assert (round(slow.download_s, 2), round(slow.load_s, 2), slow.shards) == (131.42, 4380.55, 29)
    assert round(slow.per_shard_s, 2) == 151.05
    fast = loading.load_times(model, per_rank, h100, {"VLLM_LAB_STORAGE_GIB_S": "5"})
    assert round(fast.load_s, 2) == 32.85  # the GPU's own 2.0 GiB/s is the bound
    assert loading.load_times(model, per_rank, h100, {}) == fast


def settings(env: dict[str, str]) -> CoreSettings:
    from vllmfacts.gpu import NodeGpus

    return CoreSettings(
        era=Era.V0_33,
        model=resolve(LLAMA_70B),
        served_name=LLAMA_70B,
        gpus=NodeGpus(gpu=gpu_types()["h100"], installed=2, visible=(0, 1)),
        utilization=0.95,
        max_model_len=4096,
        derived_max_len=131072.0,
        tp=2,
        pp=1,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        enforce_eager=False,
        nnodes=1,
        node_rank=0,
        master_addr="127.0.0.1",
        master_port=29500,
        time_scale=1e9,
        env=env,
    )


def test_the_load_prints_one_line_per_shard_in_vllms_words() -> None:
    out = io.StringIO()
    _load_weights(settings({"VLLM_LAB_STORAGE_GIB_S": "0.015"}), VllmLog("EngineCore", out), None)
    lines = [ln.split(") ", 1)[1] if ") " in ln else "" for ln in out.getvalue().splitlines()]
    bar = [ln for ln in lines if ln.startswith("Loading safetensors checkpoint shards")]
    assert len(bar) == 31  # opened, 29 shards, closed
    assert bar[0].endswith("0/29 [00:00<?, ?it/s]")
    assert bar[1].endswith(" 3% Completed | 1/29 [02:31<1:10:29, 151.05s/it]")
    assert bar[-2] == bar[-1]
    assert bar[-1].endswith("100% Completed | 29/29 [1:13:00<00:00, 151.05s/it]")
    assert lines[lines.index(bar[-1]) + 2] == ""  # the bar format's closing newline
    assert lines[-2].endswith("[default_loader.py:506] Loading weights took 4380.55 seconds")
    assert lines[-1].endswith("Model loading took 65.71 GiB memory and 4511.967158 seconds")


def test_config_resolution_refuses_a_bad_storage_rate() -> None:
    """`vllm-lab serve` stops at config resolution, as vLLM does on a bad engine argument."""
    out = io.StringIO()
    env = {"VLLM_LAB_STORAGE_GIB_S": "-0.5"}
    args = argparse.Namespace(download_dir=None)
    with pytest.raises(apiserver._Failed):
        apiserver._settings(args, env, Era.V0_33, 100.0, LLAMA_70B, VllmLog("APIServer", out))
    assert out.getvalue().splitlines()[-1].split(") ", 1)[1] == (
        "ValueError: VLLM_LAB_STORAGE_GIB_S='-0.5': not a positive number (the node volume's "
        "read rate in GiB/s, e.g. 0.015)"
    )


@pytest.mark.parametrize(
    ("n", "total", "elapsed", "line"),
    [  # tqdm 4.70.1's own format_meter (in .venv-vllm) gave these
        (0, 67, 0.0, "  0%|          | 0/67 [00:00<?, ?it/s]"),
        (44, 67, 44 * 9 / 67, " 66%|██████▌   | 44/67 [00:05<00:03,  7.44it/s]"),
        (67, 67, 9.0, "100%|██████████| 67/67 [00:09<00:00,  7.44it/s]"),
        (1, 3, 2.5, " 33%|███▎      | 1/3 [00:02<00:05,  2.50s/it]"),
    ],
)
def test_the_capture_bar_is_tqdms_default(n: int, total: int, elapsed: float, line: str) -> None:
    desc = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
    assert loading.tqdm_line(desc, n, total, elapsed) == f"{desc}: {line}"
