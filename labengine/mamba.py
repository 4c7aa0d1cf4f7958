"""The Mamba state of a hybrid (Jamba-style) model, and the two bugs of the Jamba write-up that
corrupt it silently: fluent wrong text, HTTP 200, normal metrics, no log line.

- `decode-before-prefill` (vLLM PR #32118, "Fix stale SSM state for new Mamba requests scheduled
  as decode"): when the step's token budget (`--max-num-batched-tokens`) is nearly spent, the
  scheduler gives a new request only the one token left, and a request scheduled with one token
  is classified as decode. A Mamba layer
  reads its state before writing it, so the request continues from whatever its state slot last
  held (attention writes its KV before reading it and is immune). It takes load to spend the
  budget to its last token, and a slot that was used before (the free queue sweeps the whole
  buffer first): a small buffer (`--gpu-memory-utilization 0.2`) reuses slots sooner and makes
  it reproducible.
- `uint32-state-index`: the kernels compute a slot's element offset in a 32-bit unsigned integer.
  Slots are handed out in the order they were freed (vLLM's free-block queue: allocate from the
  head, free to the tail), so the cursor sweeps the whole pool as requests come and go; once a
  slot's offset passes 2**32 elements it wraps onto an earlier slot and the request computes on
  that slot's state. A pool smaller than 2**32 elements (`--gpu-memory-utilization 0.2`) never
  gets there: the fault is masked, not gone.

The build is chosen by the lab engine's own environment variable VLLM_LAB_BUILD (envs.LAB: no
vLLM reads VLLM_LAB_* names): a comma-separated list of the bugs above, or `fixed` (the default: the
scheduler fix and the 64-bit index).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmfacts import arch

BUILD_ENV = "VLLM_LAB_BUILD"
INDEX_LIMIT = 2**32  # what a uint32 offset can address


class Bug(enum.StrEnum):
    DECODE_BEFORE_PREFILL = "decode-before-prefill"
    UINT32_STATE_INDEX = "uint32-state-index"


class BuildError(ValueError):
    pass


def build_bugs(env: Mapping[str, str]) -> frozenset[Bug]:
    """The bugs of the engine build VLLM_LAB_BUILD names; `fixed` (or unset): none."""
    raw = env.get(BUILD_ENV, "fixed").strip()
    if raw in ("", "fixed"):
        return frozenset()
    bugs = set()
    for part in raw.split(","):
        name = part.strip()
        try:
            bugs.add(Bug(name))
        except ValueError:
            allowed = ", ".join(["fixed", *(b.value for b in Bug)])
            raise BuildError(f"{BUILD_ENV}={raw!r}: {name!r} is not one of {allowed}") from None
    return frozenset(bugs)


def slot_elements(config: dict[str, Any]) -> int:
    """Elements of one request's Mamba state over all Mamba layers: the SSM state
    (d_inner x d_state) and the conv window (d_inner x (d_conv - 1)) per layer."""
    h = int(config["hidden_size"])
    inner = int(config["mamba_expand"]) * h
    per_layer = inner * int(config["mamba_d_state"]) + inner * (int(config["mamba_d_conv"]) - 1)
    layers = sum(
        1 for i in range(int(config["num_hidden_layers"])) if not arch.periodic(config, i, "attn")
    )
    return per_layer * layers


@dataclass
class StatePool:
    """The state slots a memory budget holds, handed out and freed in FIFO order, with what
    each slot last held (the prompt whose state it is)."""

    slots: int
    slot_elems: int
    bugs: frozenset[Bug]
    free: deque[int] = field(init=False)
    held_by: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free = deque(range(self.slots))

    @classmethod
    def sized(
        cls, config: dict[str, Any], pool_bytes: int, dtype_bytes: int, bugs: frozenset[Bug]
    ) -> StatePool:
        elems = slot_elements(config)
        return cls(max(1, pool_bytes // (elems * dtype_bytes)), elems, bugs)

    @property
    def wraps(self) -> bool:
        """Whether any slot of this pool lies past what a uint32 offset reaches."""
        return self.slots * self.slot_elems > INDEX_LIMIT

    def kernel_slot(self, slot: int) -> int:
        """The slot the kernels really address for `slot`."""
        if Bug.UINT32_STATE_INDEX not in self.bugs:
            return slot
        return ((slot * self.slot_elems) % INDEX_LIMIT) // self.slot_elems

    def take(self) -> int:
        if not self.free:
            raise RuntimeError("no free state slot: admit schedules only while one is free")
        return self.free.popleft()

    def release(self, slot: int, prompt: str) -> None:
        self.held_by[slot] = prompt
        self.free.append(slot)


def admit(
    pool: StatePool, prompts: Sequence[int], budget: int
) -> list[tuple[int, str | None] | None]:
    """The slot of each new request (`prompts`: their prompt tokens, in arrival order) and the
    stale state it computes on (whose prompt that state was, None when it is correct); None for
    a request that waits, no state slot being free (vLLM schedules it once one is).

    vLLM v1's scheduler, step by step: requests already running come first (one decode token
    each, or the next chunk of a prompt they are still prefilling), then waiting requests in
    arrival order, each given min(prompt tokens left, budget left); a request gets its state
    slot when it is first scheduled. A request whose first chunk is one token is run as a
    decode. Requests that finished their prompt keep decoding through the steps that follow."""
    if budget < 1:
        raise ValueError(f"max_num_batched_tokens {budget}: a step schedules at least one token")
    n = len(prompts)
    out: list[tuple[int, str | None] | None] = [None] * n
    left = [max(1, int(p)) for p in prompts]  # prompt tokens not yet computed
    waiting = deque(range(n))
    chunked: list[int] = []  # scheduled, their prompt not yet done
    decoding = 0
    while waiting or chunked:
        room = budget - decoding
        if room <= 0:  # the running requests end before anything new fits
            decoding, room = 0, budget
        scheduled: list[int] = []
        for i in chunked:
            take = min(left[i], room)
            left[i] -= take
            room -= take
            scheduled.append(i)
        while waiting and room > 0 and pool.free:
            i = waiting.popleft()
            take = min(left[i], room)
            out[i] = _first_step(pool, one_token=take == 1)
            left[i] -= take
            room -= take
            scheduled.append(i)
        chunked = [i for i in scheduled if left[i] > 0]
        decoding += sum(1 for i in scheduled if left[i] == 0)
        if not pool.free and not chunked:
            break  # the rest wait for a slot a finished request frees
    return out


def _first_step(pool: StatePool, one_token: bool) -> tuple[int, str | None]:
    slot = pool.take()
    addressed = pool.kernel_slot(slot)
    if addressed != slot:
        return slot, pool.held_by.get(addressed, f"\x00slot {addressed}")
    if one_token and Bug.DECODE_BEFORE_PREFILL in pool.bugs and slot in pool.held_by:
        return slot, pool.held_by[slot]
    return slot, None


def stale_prompt(prompt: str, stale: str | None) -> str:
    """What the model computes on: the prompt, continued from a stale state when there is one
    (deterministic: the same stale state and prompt give the same fluent wrong answer)."""
    return prompt if stale is None else f"{stale}\x00stale state\x00{prompt}"
