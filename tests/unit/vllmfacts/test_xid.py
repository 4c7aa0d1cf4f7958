"""A GPU XID error's facts: the driver's line, PyTorch's CUDA error, the device's fault and the
seeds' kernel-log watch."""

from __future__ import annotations

import re
from pathlib import Path

from vllmfacts import xid
from vllmfacts.xid import Xid


def test_the_driver_line_is_krcreportxids_format() -> None:
    # "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s" (kernel_rc.c)
    assert xid.xid_line(Xid.FALLEN_OFF_THE_BUS, None, None) == (
        "NVRM: Xid (PCI:0000:00:1e): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus."
    )
    assert xid.xid_line(Xid.DOUBLE_BIT_ECC, 4242, "VLLM::EngineCor") == (
        "NVRM: Xid (PCI:0000:00:1e): 48, pid=4242, name=VLLM::EngineCor, An uncorrectable "
        "double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0."
    )
    # 79 is followed by the device's own print (osHandleGpuLost's NV_DEV_PRINTF)
    assert xid.kernel_lines(Xid.FALLEN_OFF_THE_BUS, None, None)[1] == (
        "NVRM: GPU 0000:00:1e.0: GPU has fallen off the bus."
    )
    assert len(xid.kernel_lines(Xid.DOUBLE_BIT_ECC, None, None)) == 1


def test_the_cuda_error_is_c10s_check_message() -> None:
    lost = xid.cuda_error(Xid.FALLEN_OFF_THE_BUS).splitlines()
    assert lost[0] == "CUDA error: unspecified launch failure"
    assert lost[1].startswith("Search for `cudaErrorLaunchFailure' in https://docs.nvidia.com/")
    assert lost[2].startswith("CUDA kernel errors might be asynchronously reported")
    assert lost[3] == "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    assert lost[-1] == "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
    ecc = xid.cuda_error(Xid.DOUBLE_BIT_ECC).splitlines()
    assert ecc[0] == "CUDA error: uncorrectable ECC error encountered"
    # not of the launch-failure family: the other suffix (get_cuda_async_error_suffix)
    assert ecc[2] == "For more detailed error information, run with CUDA_LOG_FILE=stderr"


def test_the_watch_counts_xid_lines_by_kind(tmp_path: Path) -> None:
    xid.append_kernel_log(tmp_path, ["usb 2-3: new device"], uptime_s=12.5)
    xid.append_kernel_log(
        tmp_path, xid.kernel_lines(Xid.FALLEN_OFF_THE_BUS, None, None), 8412.512204
    )
    text = (tmp_path / xid.KERNEL_LOG).read_text().splitlines()
    assert text[0] == "[   12.500000] usb 2-3: new device"
    assert text[1].startswith("[ 8412.512204] NVRM: Xid (PCI:0000:00:1e): 79, ")
    # "NVRM: GPU ...: GPU has fallen off the bus." is no XID line: one 79, no 48
    assert xid.count_xids(tmp_path) == {Xid.DOUBLE_BIT_ECC: 0, Xid.FALLEN_OFF_THE_BUS: 1}
    prom = xid.write_watch(tmp_path).read_text()
    first = xid.boot_id(tmp_path)
    assert f'node_kernel_log_nvrm_xid_lines{{boot_id="{first}",xid="79"}} 1\n' in prom
    assert f'node_kernel_log_nvrm_xid_lines{{boot_id="{first}",xid="48"}} 0\n' in prom
    assert "# TYPE node_kernel_log_nvrm_xid_lines gauge" in prom
    assert sorted(p.name for p in (tmp_path / xid.TEXTFILE_DIR).iterdir()) == [
        "kernel_log.prom"
    ]  # written aside and renamed: the collector never reads half a file
    xid.boot(tmp_path)  # a reboot: the ring buffer and the watch's count start anew
    assert xid.count_xids(tmp_path) == dict.fromkeys(Xid, 0)
    assert not (tmp_path / xid.TEXTFILE_DIR / "kernel_log.prom").exists()
    # a new boot, a new series: the alert never compares this boot's count with the last's
    assert xid.boot_id(tmp_path) != first
    assert f'boot_id="{xid.boot_id(tmp_path)}"' in xid.write_watch(tmp_path).read_text()


def test_the_dmesg_prefix_is_printks() -> None:
    assert xid.dmesg_prefix(0.000001) == "[    0.000001] "
    assert re.fullmatch(r"\[\d{6}\.\d{6}\] ", xid.dmesg_prefix(123456.5))


def test_the_watch_of_a_node_that_never_booted_keeps_its_kernel_log(tmp_path: Path) -> None:
    """A new GPU volume has no boot id: the watch gives it one and counts what is logged."""
    xid.append_kernel_log(tmp_path, xid.kernel_lines(Xid.FALLEN_OFF_THE_BUS, None, None), 9.5)
    prom = xid.write_watch(tmp_path).read_text()
    assert f'{{boot_id="{xid.boot_id(tmp_path)}",xid="79"}} 1\n' in prom
    assert xid.count_xids(tmp_path)[Xid.FALLEN_OFF_THE_BUS] == 1
