"""The Mamba state of a hybrid (Jamba-style) model, and the two bugs of seeds/003 that corrupt it
silently: fluent wrong text, HTTP 200, normal metrics, no log line.

- `decode-before-prefill`: the scheduler marks only the first of the new requests it admits in one
  step as prefill; the others run their first step as decode. A Mamba layer reads its state before
  writing it, so such a request continues from whatever its state slot last held (attention
  writes its KV before reading it and is immune). Which requests are hit follows from how many
  arrive together: one at a time, none is.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labengine import arch

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
        return self.free.popleft() if self.free else 0

    def release(self, slot: int, prompt: str) -> None:
        self.held_by[slot] = prompt
        self.free.append(slot)


def admit(pool: StatePool, new: int) -> list[tuple[int, str | None]]:
    """The slot of each of the `new` requests one scheduling step admits, in arrival order, and
    the stale state it computes on (whose prompt that state was), or None when it is correct."""
    out: list[tuple[int, str | None]] = []
    for i in range(new):
        slot = pool.take()
        addressed = pool.kernel_slot(slot)
        stale: str | None = None
        if addressed != slot:
            stale = pool.held_by.get(addressed, f"\x00slot {addressed}")
        elif i > 0 and Bug.DECODE_BEFORE_PREFILL in pool.bugs and slot in pool.held_by:
            stale = pool.held_by[slot]
        out.append((slot, stale))
    return out


def stale_prompt(prompt: str, stale: str | None) -> str:
    """What the model computes on: the prompt, continued from a stale state when there is one
    (deterministic: the same stale state and prompt give the same fluent wrong answer)."""
    return prompt if stale is None else f"{stale}\x00stale state\x00{prompt}"
