"""The Jamba-style model's size and the two Mamba-state bugs of seeds/003."""

from __future__ import annotations

from multiprocessing import Pipe

import pytest

from labengine import mamba, models
from labengine.core import _Steps

JAMBA = "gameday-lab/jamba-hybrid-1b"


def test_jamba_parameter_count_and_state_slot() -> None:
    m = models.resolve(JAMBA)
    assert m.params() == 1_532_113_088
    # 14 Mamba layers (attention at 4 and 12) x d_inner 4096 x (d_state 16 + d_conv 4 - 1)
    assert mamba.slot_elements(m.config) == 14 * 4096 * 19


def test_build_names() -> None:
    assert mamba.build_bugs({}) == frozenset()
    assert mamba.build_bugs({"GAMEDAY_LAB_BUILD": "uint32-state-index"}) == {
        mamba.Bug.UINT32_STATE_INDEX
    }
    with pytest.raises(mamba.BuildError, match="'nope' is not one of fixed"):
        mamba.build_bugs({"GAMEDAY_LAB_BUILD": "nope"})


def test_uint32_index_wraps_past_four_billion_only_in_a_large_pool() -> None:
    bugs = frozenset({mamba.Bug.UINT32_STATE_INDEX})
    big = mamba.StatePool(slots=5000, slot_elems=1_089_536, bugs=bugs)
    assert big.wraps is True
    assert big.kernel_slot(3942) == 3942  # 3942 * 1_089_536 = 4_294_950_912 < 2**32
    assert big.kernel_slot(3943) == 0  # 4_296_040_448 - 2**32 = 1_073_152 < one slot
    small = mamba.StatePool(slots=500, slot_elems=1_089_536, bugs=bugs)
    assert small.wraps is False


def test_wrapped_request_computes_on_the_stale_state_of_slot_zero() -> None:
    pool = mamba.StatePool(
        slots=3944, slot_elems=1_089_536, bugs=frozenset({mamba.Bug.UINT32_STATE_INDEX})
    )
    for _ in range(3943):
        [(slot, stale)] = mamba.admit(pool, 1)
        assert stale is None
        pool.release(slot, f"prompt {slot}")
    [(slot, stale)] = mamba.admit(pool, 1)
    assert (slot, stale) == (3943, "prompt 0")


def test_decode_before_prefill_hits_the_second_of_a_step_on_a_used_slot() -> None:
    pool = mamba.StatePool(
        slots=2, slot_elems=10, bugs=frozenset({mamba.Bug.DECODE_BEFORE_PREFILL})
    )
    assert mamba.admit(pool, 2) == [(0, None), (1, None)]  # fresh slots hold no state
    pool.release(0, "a")
    pool.release(1, "b")
    assert mamba.admit(pool, 2) == [(0, None), (1, "b")]


def test_fixed_build_is_never_wrong() -> None:
    pool = mamba.StatePool(slots=5000, slot_elems=1_089_536, bugs=frozenset())
    pool.free.rotate(-3942)
    pool.held_by[1] = "x"
    assert mamba.admit(pool, 2) == [(3942, None), (3943, None)]


def test_the_engine_core_admits_what_waits_in_the_pipe_in_one_step() -> None:
    api, core_end = Pipe()
    pool = mamba.StatePool(
        slots=4, slot_elems=10, bugs=frozenset({mamba.Bug.DECODE_BEFORE_PREFILL})
    )
    for slot, prompt in enumerate(["w", "x", "y", "z"]):
        pool.take()
        pool.release(slot, prompt)
    steps = _Steps(core_end, pool)
    api.send(("gen", "req-0", "alone", 1, 4, 0))
    assert steps.next()[1] == "req-0"
    assert steps.admitted == {"req-0": (0, None)}
    for rid in ("req-1", "req-2"):
        api.send(("gen", rid, "together", 1, 4, 0))
    assert core_end.poll(1.0)
    assert steps.next()[1] == "req-1"
    assert steps.next()[1] == "req-2"
    assert steps.admitted == {"req-0": (0, None), "req-1": (1, None), "req-2": (2, "y")}
