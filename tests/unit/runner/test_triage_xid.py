"""The advice for a GPU XID: NVIDIA's catalogue words for each XID the paste shows, and what to
do by what kind of XID it is (runner.triage.xid)."""

from __future__ import annotations

from pathlib import Path

from runner.spec.scenario import discover, load_scenario
from runner.triage import triage

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]


def _advice(text: str) -> list[str]:
    [f] = triage(text, SCEN)
    assert f.scenario.scenario.metadata.id == "gpu-xid-error"
    return list(f.advice)


def test_an_application_xid_points_at_the_process_the_driver_names() -> None:
    advice = _advice(
        "[ 81.1] NVRM: Xid (PCI:0000:3b:00): 31, pid=4410, name=VLLM::Worker_TP0, Ch 00000008, "
        "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_00000000.\n"
    )
    assert advice[0].startswith("Xid 31 (ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT): GPU memory")
    assert "VLLM::Worker_TP0 (pid 4410)" in advice[-1]
    assert not any("reset it" in a for a in advice)  # nothing says the GPU is at fault


def test_an_xid_that_leaves_the_gpu_unusable_says_drain_and_reset() -> None:
    advice = _advice(
        "kernel: NVRM: Xid (PCI:0000:b1:00): 119, pid=901, name=python3, Timeout after 6s of "
        "waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL).\n"
    )
    assert advice[0].startswith("Xid 119 (GSP_RPC_TIMEOUT): GSP RPC timeout")
    assert any("drain the node's work off it and reset it" in a for a in advice)


def test_a_cleanup_xid_names_the_xid_that_caused_it() -> None:
    advice = _advice(
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=12, name=python3, Ch 00000001 caused by "
        "previous Xid 149\n"
    )
    assert [a.split(" (")[0] for a in advice[:2]] == ["Xid 45", "Xid 149"]
    assert any("NVLink" in a and "nvlink --status" in a for a in advice)


def test_an_xid_gameday_does_not_know_is_still_named() -> None:
    advice = _advice("NVRM: Xid (PCI:0000:01:00): 171, pid=1, name=x, Uncorrectable DRAM\n")
    assert advice == ["Xid 171: not among the codes gameday knows; see NVIDIA's Xid catalogue"]


def test_a_line_that_only_mentions_xid_is_no_finding() -> None:
    assert triage("grep Xid /var/log/kern.log returned nothing; XID count is 0\n", SCEN) == []


def test_the_gpu_lost_line_without_its_xid_line_is_explained_as_79() -> None:
    advice = _advice(
        "kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
        "kernel: NVRM: GPU 0000:3b:00.0: GPU serial number is 1564320012345.\n"
    )
    assert advice[0].startswith("Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)")


def test_the_device_plugins_xid_is_explained_as_the_drivers() -> None:
    advice = _advice(
        "2024/03/02 11:20:07 XidCriticalError: Xid=79 on Device=GPU-1b2c3d4e-5f60-7182-93a4-"
        "b5c6d7e8f901, the device will go unhealthy.\n"
    )
    assert advice[0].startswith("Xid 79 (")
    assert any("drain the node's work off it and reset it" in a for a in advice)
