"""PyTorch's out-of-memory error whose own list of the GPU's processes shows others holding it
(runner.triage.oom): who is "this process", inside a container too, and how much is enough."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from runner.spec.expectations import TriageSignature
from runner.spec.scenario import discover, load_scenario
from runner.triage import triage
from runner.triage.match import Log
from runner.triage.normalise import normalise
from runner.triage.oom import find_held_by_others, others_hold

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]
GIB = 1 << 30


def _oom(
    procs: str, total: str = "39.39 GiB", mine: str = "0 bytes", spare: str = "0 bytes"
) -> str:
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a "
        f"total capacity of {total} of which 512.00 MiB is free. {procs}Of the allocated memory "
        f"{mine} is allocated by PyTorch, and {spare} is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    )


def _others(text: str) -> float | None:
    found = find_held_by_others(Log(normalise(text)))
    return None if found is None else float(found[0].captures["others"].split()[0])


def test_this_process_is_the_entry_pytorch_names_so() -> None:
    text = _oom(
        "Process 7 has 12.00 GiB memory in use. Including non-PyTorch memory, this process has "
        "26.00 GiB memory in use. ",
        mine="25.00 GiB",
    )
    assert _others(text) == 12.0


def test_in_a_container_the_entry_closest_above_what_pytorch_holds_is_the_failing_process() -> None:
    # host pids: no entry is "this process"; 20.5 GiB is closest above the 20 GiB PyTorch holds
    text = _oom(
        "Process 70 has 20.50 GiB memory in use. Process 71 has 16.00 GiB memory in use. ",
        mine="19.00 GiB",
        spare="1.00 GiB",
    )
    assert _others(text) == 16.0


def test_a_process_alone_on_its_gpu_in_a_container_is_no_stranger() -> None:
    text = _oom("Process 3815 has 37.90 GiB memory in use. ", mine="35.00 GiB", spare="1.50 GiB")
    assert _others(text) is None
    assert triage(text, SCEN) == []


def test_a_neighbour_under_a_quarter_of_the_gpu_is_not_read() -> None:
    text = _oom(
        "Process 9 has 9.50 GiB memory in use. Including non-PyTorch memory, this process has "
        "29.00 GiB memory in use. ",
        mine="28.00 GiB",
    )
    assert _others(text) is None  # 9.5 of 39.39 GiB: under a quarter


def test_every_other_process_counts_and_sizes_keep_their_units() -> None:
    text = _oom(
        "Process 1 has 512.00 MiB memory in use. Process 2 has 6.00 GiB memory in use. "
        "Process 3 has 4.50 GiB memory in use. Process 4 has 900.00 MiB memory in use. ",
        total="23.68 GiB",
        mine="310.00 MiB",
        spare="2.00 MiB",
    )
    # the failing process: 512 MiB, the closest above the 312 MiB PyTorch holds
    assert _others(text) == pytest.approx(6.0 + 4.5 + 900 / 1024, abs=0.01)


def test_a_paste_cut_inside_the_list_is_not_read() -> None:
    cut = (
        "CUDA out of memory. Tried to allocate 892.00 MiB. GPU 0 has a total capacity of 44.39 "
        "GiB of which 36.38 MiB is free. Process 11 has 1.42 GiB memory in use. Process 12 has "
        "40.11 GiB memory in use. ...\n"
    )
    assert _others(cut) is None


def test_the_message_wrapped_at_its_sentences_and_the_older_spelling_are_read() -> None:
    text = (
        "CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "GPU 1 has a total capacty of 23.69 GiB of which 100.00 MiB is free.\n"
        "Process 4410 has 11.20 GiB memory in use.\n"
        "Including non-PyTorch memory, this process has 12.30 GiB memory in use.\n"
        "Of the allocated memory 11.00 GiB is allocated by PyTorch, and 700.00 MiB\n"
        "is reserved by PyTorch but unallocated.\n"
    )
    assert _others(text) == 11.2
    [f] = triage(text, SCEN)
    assert f.scenario.scenario.metadata.id == "stray-gpu-process"
    assert any("nvidia-smi --query-compute-apps" in r for r in f.fixes)


def test_where_the_paste_lost_what_pytorch_holds_the_largest_entry_is_the_failing_process() -> None:
    # whichever entry is the failing one, the others hold at least all but the largest
    assert others_hold({"procs": "Process 1 has 40.00 GiB memory in use. "}) == 0
    two = "Process 1 has 30.00 GiB memory in use. Process 2 has 9.00 GiB memory in use. "
    assert others_hold({"procs": two}) == 9 * GIB
    assert others_hold({"procs": ""}) is None
    own = "Including non-PyTorch memory, this process has 1.00 GiB memory in use. "
    assert others_hold({"procs": "Process 1 has 4.00 GiB memory in use. " + own}) == 4 * GIB


def test_held_by_others_is_a_kind_of_its_own() -> None:
    with pytest.raises(ValidationError, match="one of in_order, stalled_stats, text_check or"):
        TriageSignature.model_validate(
            {"when": "w", "note": "n", "held_by_others": True, "in_order": [{"regex": "x"}]}
        )
    assert TriageSignature.model_validate({"when": "w", "note": "n", "held_by_others": True})


def test_uses_nvml_could_not_tell_are_not_read() -> None:
    # WSL2: NVML's unknown use, 2^64 - 1 bytes, printed for every process
    unknown = "17179869184.00 GiB"
    text = _oom(
        f"Including non-PyTorch memory, this process has {unknown} memory in use. "
        f"Process 74390 has {unknown} memory in use. ",
        total="4.00 GiB",
        mine="3.20 GiB",
        spare="200.00 MiB",
    )
    assert _others(text) is None


def test_a_per_process_cap_or_a_gpu_with_room_is_not_the_neighbours_doing() -> None:
    capped = (
        "CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 44.52 GiB "
        "of which 20.10 GiB is free. Process 9 has 12.30 GiB memory in use. Including non-PyTorch "
        "memory, this process has 12.00 GiB memory in use. 13.36 GiB allowed; Of the allocated "
        "memory 11.20 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch but "
        "unallocated.\n"
    )
    assert _others(capped) is None
    roomy = _oom(
        "Process 9 has 12.00 GiB memory in use. Including non-PyTorch memory, this process has "
        "6.00 GiB memory in use. ",
        mine="5.00 GiB",
    ).replace("of which 512.00 MiB is free", "of which 2.00 GiB is free")
    assert _others(roomy) is None  # 2 GiB free held the 1 GiB asked for


def test_an_older_message_without_a_list_reads_what_is_neither_free_nor_pytorchs() -> None:
    # PyTorch before 2.1: 7.81 of 7.92 GiB neither free nor PyTorch's
    text = (
        "Tried to allocate 216.00 MiB (GPU 0; 7.92 GiB total capacity; 69.17 MiB already "
        "allocated; 24.56 MiB free; 86.00 MiB reserved in total by PyTorch) If reserved memory "
        "is >> allocated memory try setting max_split_size_mb to avoid fragmentation.\n"
    )
    assert _others(text) == pytest.approx(7.81, abs=0.01)
    cached = text.replace("86.00 MiB reserved in total by PyTorch", "86.00 MiB cached")
    assert _others(cached) == pytest.approx(7.81, abs=0.01)  # before 1.4


@pytest.mark.parametrize(
    "figures",
    [
        # its own memory: 1 GiB neither free nor PyTorch's is its context and libraries
        "(GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.44 MiB free; "
        "14.75 GiB reserved in total by PyTorch)",
        # a cap, not the neighbours
        "(GPU 0; 39.39 GiB total capacity; 9.00 GiB already allocated; 12.00 MiB free; "
        "9.80 GiB allowed; 9.50 GiB reserved in total by PyTorch)",
    ],
)
def test_an_older_message_of_its_own_memory_or_a_cap_is_not_read(figures: str) -> None:
    assert (
        _others(f"RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB {figures}\n")
        is None
    )


def test_a_message_cut_in_its_list_or_after_it_is_read_only_where_no_whole_one_is() -> None:
    head = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 418.00 MiB. GPU 0 has a "
        "total capacity of 23.69 GiB of which 193.25 MiB is free. Process 1254 has 730.00 MiB "
        "memory in use. Process 1348 has 3.70 GiB memory in use. Process 1892152 has 2.96 GiB "
        "memory in use. Process 2167142 has 14.90 GiB memory in use. "
    )
    # 14.90 GiB, the largest, taken for the failing process: 7.37 GiB is the others' least
    assert _others(head + "\n") == 7.37
    assert _others(head + "Of the allocated memory 14\n") == 7.37
    # a cut list whose others hold less than a quarter of the GPU is no stranger's doing
    small = head.replace("Process 1348 has 3.70 GiB", "Process 1348 has 0.70 GiB").replace(
        "Process 1892152 has 2.96 GiB", "Process 1892152 has 0.96 GiB"
    )
    assert _others(small + "\n") is None
    # a whole message later in the paste is read instead
    whole = _oom(
        "Process 7 has 12.00 GiB memory in use. Including non-PyTorch memory, this process has "
        "26.00 GiB memory in use. ",
        mine="25.00 GiB",
    )
    assert _others(head + "\n" + whole) == 12.0
