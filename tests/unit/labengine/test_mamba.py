"""The Jamba-style model's size and the two Mamba-state bugs of the Jamba write-up."""

from __future__ import annotations

from multiprocessing import Pipe

import pytest

from labengine import mamba
from labengine.core import _Steps
from vllmfacts import models

JAMBA = "gameday-lab/jamba-hybrid-1b"


def test_jamba_parameter_count_and_state_slot() -> None:
    m = models.resolve(JAMBA)
    assert m.params() == 1_540_371_968
    # 14 Mamba layers (attention at 4 and 12) x d_inner 4096 x (d_state 64 + d_conv 4 - 1)
    assert mamba.slot_elements(m.config) == 14 * 4096 * 67 == 3_842_048


def test_build_names() -> None:
    assert mamba.build_bugs({}) == frozenset()
    assert mamba.build_bugs({"VLLM_LAB_BUILD": "uint32-state-index"}) == {
        mamba.Bug.UINT32_STATE_INDEX
    }
    with pytest.raises(mamba.BuildError, match="'nope' is not one of fixed"):
        mamba.build_bugs({"VLLM_LAB_BUILD": "nope"})


def test_uint32_index_wraps_past_four_billion_only_in_a_large_pool() -> None:
    bugs = frozenset({mamba.Bug.UINT32_STATE_INDEX})
    # the pools of 15.87 GiB (util 0.9) and 0.26 GiB (util 0.2) on an A10G, in bf16 slots
    big = mamba.StatePool(slots=2217, slot_elems=3_842_048, bugs=bugs)
    assert big.wraps is True
    assert big.kernel_slot(1117) == 1117  # 1117 * 3_842_048 = 4_291_567_616 < 2**32
    assert big.kernel_slot(1118) == 0  # 4_295_409_664 - 2**32 = 442_368 < one slot
    assert big.kernel_slot(2216) == 1098  # (2216 * 3_842_048 - 2**32) // 3_842_048
    small = mamba.StatePool(slots=36, slot_elems=3_842_048, bugs=bugs)
    assert small.wraps is False


def test_wrapped_request_computes_on_the_stale_state_of_slot_zero() -> None:
    pool = mamba.StatePool(
        slots=1119, slot_elems=3_842_048, bugs=frozenset({mamba.Bug.UINT32_STATE_INDEX})
    )
    for _ in range(1118):
        [(slot, stale)] = mamba.admit(pool, [20], 2048)
        assert stale is None
        pool.release(slot, f"prompt {slot}")
    [(slot, stale)] = mamba.admit(pool, [20], 2048)
    assert (slot, stale) == (1118, "prompt 0")


def _used(slots: int) -> mamba.StatePool:
    """A buggy pool whose every slot has held a request's state (slot k held prompt "p<k>")."""
    pool = mamba.StatePool(
        slots=slots, slot_elems=10, bugs=frozenset({mamba.Bug.DECODE_BEFORE_PREFILL})
    )
    for k in range(slots):
        pool.release(pool.take(), f"p{k}")
    return pool


def test_decode_before_prefill_needs_the_budget_spent_to_its_last_token() -> None:
    # 63 + 1 of a 64-token budget: the second new request is scheduled with one token, run as a
    # decode, and continues from what its slot held
    assert mamba.admit(_used(4), [63, 30], 64) == [(0, None), (1, "p1")]
    # room to spare, or the budget spent exactly: each starts with a real prefill
    assert mamba.admit(_used(4), [30, 30], 64) == [(0, None), (1, None)]
    assert mamba.admit(_used(4), [64, 30], 64) == [(0, None), (1, None)]
    # a prompt chunked over steps is its own state's continuation, never stale
    assert mamba.admit(_used(4), [100, 50], 64) == [(0, None), (1, None)]
    # requests still decoding take a token each first: 30 + 34 fill the first step; in the
    # next, 2 decode, the third takes 61, and the fourth gets the one token left
    assert mamba.admit(_used(4), [30, 34, 61, 9], 64)[3] == (3, "p3")


def test_decode_before_prefill_needs_a_slot_used_before() -> None:
    pool = mamba.StatePool(
        slots=4, slot_elems=10, bugs=frozenset({mamba.Bug.DECODE_BEFORE_PREFILL})
    )
    assert mamba.admit(pool, [63, 30], 64) == [(0, None), (1, None)]  # fresh: nothing stale


def test_one_request_at_a_time_is_never_hit_unless_its_prompt_is_one_token() -> None:
    pool = _used(4)
    assert [mamba.admit(pool, [n], 64) for n in (63, 64, 65, 2)] == [[(k, None)] for k in range(4)]
    assert mamba.admit(_used(4), [1], 64) == [(0, "p0")]  # a one-token prompt is a "decode"


def test_fixed_build_is_never_wrong() -> None:
    pool = mamba.StatePool(slots=2217, slot_elems=3_842_048, bugs=frozenset())
    pool.free.rotate(-1117)
    pool.held_by[1] = "x"
    assert mamba.admit(pool, [63, 30], 64) == [(1117, None), (1118, None)]


def test_the_engine_core_admits_what_waits_in_the_pipe_in_one_step() -> None:
    api, core_end = Pipe()
    steps = _Steps(core_end, _used(4), budget=8)
    api.send(("gen", "req-0", "alone", 5, 4, 0))
    assert steps.next()[1] == "req-0"
    assert steps.admitted == {"req-0": (0, None)}
    for rid, tokens in (("req-1", 7), ("req-2", 5)):
        api.send(("gen", rid, "together", tokens, 4, 0))
    assert core_end.poll(1.0)
    assert steps.next()[1] == "req-1"
    assert steps.next()[1] == "req-2"
    # 7 of the 8-token budget to req-1, the last token to req-2: run as a decode on slot 2
    assert steps.admitted == {"req-0": (0, None), "req-1": (1, None), "req-2": (2, "p2")}


def test_the_build_variable_is_not_an_unknown_vllm_variable() -> None:
    from vllmfacts.envs import unknown_names
    from vllmfacts.wording import Era

    env = {"VLLM_LAB_BUILD": "fixed", "VLLM_NOPE": "1"}
    assert unknown_names(Era.V0_33, env) == ["VLLM_NOPE"]


def test_requests_beyond_the_free_slots_wait_and_never_share_one() -> None:
    pool = _used(2)
    assert mamba.admit(pool, [10, 10, 10], 2048) == [(0, None), (1, None), None]
    assert not pool.free
    with pytest.raises(RuntimeError):
        pool.take()


def test_a_budget_below_one_token_is_refused_not_looped_on() -> None:
    with pytest.raises(ValueError, match="max_num_batched_tokens 0"):
        mamba.admit(_used(2), [5], 0)


def test_a_request_that_waited_for_a_slot_gets_the_one_released_before_it() -> None:
    api, core_end = Pipe()
    steps = _Steps(core_end, _used(1), budget=64)
    for rid in ("req-0", "req-1"):
        api.send(("gen", rid, "p", 5, 4, 0))
    assert core_end.poll(1.0)
    assert steps.next()[1] == "req-0"
    assert steps.admitted == {"req-0": (0, None)}  # req-1 waits: the only slot is taken
    assert steps.pool is not None
    steps.pool.release(steps.admitted.pop("req-0")[0], "p")  # req-0 served and done
    assert steps.next()[1] == "req-1"
    assert steps.admitted == {"req-1": (0, None)}
