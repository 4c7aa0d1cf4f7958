"""The weights' fetch and load: how long each takes on the node, and the progress vLLM prints.

vLLM downloads the checkpoint silently (weight_utils.download_weights_from_hf passes
`DisabledTqdm` to snapshot_download), then iterates the safetensors shards under a tqdm bar
printed as plain text, one line per shard (weight_utils._BAR_FORMAT, the same in 0.19.1 and
0.33.0). The load reads the shards from the node's volume: the lab engine's own variable
VLLM_LAB_STORAGE_GIB_S (envs.LAB: no vLLM reads it) names that volume's read rate, which bounds
the GPU type's measured load rate (data/gpus.json load_gib_s).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from vllmfacts.gpu import GpuType
from vllmfacts.models import ModelInfo

STORAGE_ENV = "VLLM_LAB_STORAGE_GIB_S"
# transformers' save_pretrained(max_shard_size="5GB"), as Hugging Face checkpoints ship
SHARD_BYTES = 5 * 10**9
SHARDS_DESC = "Loading safetensors checkpoint shards"


class StorageError(ValueError):
    pass


def storage_gib_s(env: Mapping[str, str]) -> float | None:
    """The node volume's read rate from VLLM_LAB_STORAGE_GIB_S (None when unset)."""
    raw = env.get(STORAGE_ENV)
    if raw is None:
        return None
    try:
        rate = float(raw)
    except ValueError:
        rate = math.nan
    if not math.isfinite(rate) or rate <= 0:
        raise StorageError(
            f"{STORAGE_ENV}={raw!r}: not a positive number (the node volume's read rate "
            "in GiB/s, e.g. 0.015)"
        )
    return rate


@dataclass(frozen=True)
class LoadTimes:
    """Real-world seconds of the fetch and the load, and the shards the load goes through."""

    download_s: float
    load_s: float
    shards: int

    @property
    def per_shard_s(self) -> float:
        return self.load_s / self.shards


def load_times(
    model: ModelInfo, loaded_bytes: int, gpu: GpuType, env: Mapping[str, str]
) -> LoadTimes:
    """The fetch at the node's download rate, the load at its load rate bounded by the volume."""
    gib = loaded_bytes / 2**30
    storage = storage_gib_s(env)
    load_rate = gpu.load_gib_s if storage is None else min(gpu.load_gib_s, storage)
    return LoadTimes(
        download_s=gib / gpu.download_gib_s,
        load_s=gib / load_rate,
        shards=shard_count(model),
    )


def shard_count(model: ModelInfo) -> int:
    """The files of the model's safetensors index, else its size in ~5 GB shards."""
    index = model.path / "model.safetensors.index.json"
    if index.is_file():
        files = set(json.loads(index.read_text()).get("weight_map", {}).values())
        if files:
            return len(files)
    size = model.checkpoint_bytes or model.weight_bytes()
    return max(1, math.ceil(size / SHARD_BYTES))


def format_interval(seconds: float) -> str:
    """tqdm.format_interval: [H:]MM:SS."""
    minutes, s = divmod(int(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_line(n: int, total: int, elapsed_s: float) -> str:
    """One line of vLLM's shard bar: tqdm.format_meter with _BAR_FORMAT
    `{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining},
    {rate_fmt}]`, the rate in it/s, or s/it when a shard takes over a second."""
    rate = n / elapsed_s if n and elapsed_s else None
    if rate is None:
        remaining, rate_fmt = "?", "?it/s"
    else:
        remaining = format_interval((total - n) / rate)
        inv = 1 / rate
        rate_fmt = f"{inv:5.2f}s/it" if inv > 1 else f"{rate:5.2f}it/s"
    pct = 100 * n / total
    return (
        f"{SHARDS_DESC}: {pct:3.0f}% Completed | {n}/{total} "
        f"[{format_interval(elapsed_s)}<{remaining}, {rate_fmt}]"
    )


# tqdm's bar characters where the stream takes unicode (tqdm/std.py Bar.UTF), and the bar's width
# when tqdm cannot read the stream's columns (a pipe or a container log: 10)
_BAR_CHARS = " " + "".join(chr(c) for c in range(0x258F, 0x2587, -1))
_BAR_WIDTH = 10


def tqdm_line(desc: str, n: int, total: int, elapsed_s: float) -> str:
    """One line of a bar in tqdm's default format (tqdm/std.py format_meter, no ncols):
    `{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]`,
    as vLLM's CUDA-graph capture bar prints it."""
    steps = len(_BAR_CHARS) - 1
    full, part = divmod(int(n / total * _BAR_WIDTH * steps), steps)
    bar = _BAR_CHARS[-1] * full
    if full < _BAR_WIDTH:
        bar += _BAR_CHARS[part] + _BAR_CHARS[0] * (_BAR_WIDTH - full - 1)
    rate = n / elapsed_s if n and elapsed_s else None
    if rate is None:
        remaining, rate_fmt = "?", "?it/s"
    else:
        remaining = format_interval((total - n) / rate)
        rate_fmt = f"{1 / rate:5.2f}s/it" if rate < 1 else f"{rate:5.2f}it/s"
    return (
        f"{desc}: {100 * n / total:3.0f}%|{bar}| {n}/{total} "
        f"[{format_interval(elapsed_s)}<{remaining}, {rate_fmt}]"
    )
