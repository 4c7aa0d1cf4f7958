"""What the GPU XIDs a paste shows mean, and what to do about them.

The meanings are NVIDIA's Xid catalogue for Ampere and newer GPUs
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: each code's mnemonic, description
and "Resolution Bucket (Immediate Action)"), for the codes a serving node is likely to log. The
lines read are the driver's kernel-log line, krcReportXid's "NVRM: Xid (PCI:0000:3b:00): 13,
pid=..., name=..., ..." (src/nvidia/src/kernel/gpu/rc/kernel_rc.c in open-gpu-kernel-modules;
older drivers print the bus address without "PCI:"), its "caused by previous Xid N" for Xid 45,
and NVIDIA's node agent gpud's health reason "XID 79 (GPU has fallen off the bus) detected on
GPU PCI:0000:ae:00" (leptonai/gpud components/accelerator/nvidia/xid/health_state.go,
newXIDErrorReason; the space before the bracket is absent in older releases, as in its SXID
reason), and NVIDIA's Kubernetes device plugin's "XidCriticalError: Xid=69 on Device=GPU-...,
the device will go unhealthy." (NVIDIA/k8s-device-plugin's health check).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from runner.triage.match import Log, _finder

# the driver's line: the bus address (PCI:dddd:bb:dd, or the bare address of older drivers),
# the XID, then pid and process name where the driver knows them
XID_LINE = (
    r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}[^)]*\): (?P<xid>\d{1,3}),"
)
# gpud's health reason for the last XID it read from the kernel log
GPUD_REASON = r"\bXID (?P<xid>\d{1,3}) ?\([^()]+\) detected on (?:GPU )?\S"
# the device plugin's line for an XID it marks a GPU unhealthy for
PLUGIN_XID = r"XidCriticalError: Xid=(?P<xid>\d{1,3})\b"
_LINE = re.compile(XID_LINE + r"(?: pid=(?P<pid>[^,]*), name=(?P<name>[^,]*),)?")
_PLUGIN = re.compile(PLUGIN_XID)
_CAUSED = re.compile(r"caused by previous Xid (?P<xid>\d{1,3})\b")
_GPUD = re.compile(GPUD_REASON)
_NAMED_ONLY = (_CAUSED, _GPUD, _PLUGIN)
# the driver's own line for a GPU lost from the bus, printed only with XID 79 (osinit.c
# osHandleGpuLost), which a kernel-log paste may hold without the Xid line before it; and the
# last of the three lines its probe prints for a GPU whose registers read all ones
# (rm_is_supported_device: "NVRM: The NVIDIA GPU 0000:b3:00.0" / "NVRM: (PCI ID: 10de:26b5)
# installed in this system has" / "NVRM: fallen off the bus and is not responding to
# commands."), the same lost GPU found when the driver loads, still unusable until it is reset;
# and a call into the GPU's firmware (GSP) or a check in the driver failing with
# NV_ERR_GPU_IS_LOST, status 0x0000000F, "GPU lost from the bus" (nvstatuscodes.h), which GSP
# drivers print where the Xid line is another code or none
GSP_LOST = (
    r"NVRM: .*(?:rpcSendMessage failed with status 0x0000000[fF]\b"
    r"|GPU lost from the bus \[NV_ERR_GPU_IS_LOST\])"
)
GPU_LOST = (
    r"NVRM: GPU [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: GPU has fallen off the bus\."
    r"|(?:NVRM: |installed in this system has )fallen off the bus and is not responding to "
    r"commands\.|" + GSP_LOST
)
_LOST = re.compile(GPU_LOST)
_ANY = _finder(
    r"NVRM: Xid \(|XID \d{1,3} ?\(|XidCriticalError|fallen off the bus|rpcSendMessage failed"
    r"|NV_ERR_GPU_IS_LOST"
)
MAX_SHOWN = 6  # distinct XIDs described; a paste of a failing board may hold dozens


class Xid(NamedTuple):
    mnemonic: str
    description: str
    action: str  # NVIDIA's immediate action


# NVIDIA's catalogue, the codes a serving GPU logs (unused and display codes left out)
CATALOGUE: dict[int, Xid] = {
    8: Xid("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    11: Xid(
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "invalid or corrupted push buffer stream",
        "RESTART_APP",
    ),
    13: Xid("ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP"),
    25: Xid(
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "invalid or illegal push buffer stream", "RESTART_APP"
    ),
    31: Xid("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    32: Xid("ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream", "RESTART_APP"),
    43: Xid("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE"),
    44: Xid(
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics Engine fault during context switch",
        "IGNORE",
    ),
    45: Xid(
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "preemptive cleanup, due to previous errors",
        "follow the other Xid; alone: RESTART_FM",
    ),
    46: Xid("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
    48: Xid("ROBUST_CHANNEL_GPU_ECC_DBE", "double bit ECC error", "WORKFLOW_XID_48"),
    62: Xid("PMU_HALT_ERROR", "internal micro-controller halt", "RESET_GPU"),
    63: Xid("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE"),
    64: Xid("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"),
    69: Xid("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
    74: Xid("NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR"),
    79: Xid(
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"
    ),
    92: Xid("EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "IGNORE"),
    94: Xid("ROBUST_CHANNEL_CONTAINED_ERROR", "contained memory error", "RESTART_APP"),
    95: Xid("ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained memory error", "RESET_GPU"),
    109: Xid("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout", "RESET_GPU"),
    110: Xid("SEC_FAULT_ERROR", "security fault", "RESET_GPU"),
    119: Xid("GSP_RPC_TIMEOUT", "GSP RPC timeout", "RESET_GPU"),
    120: Xid("GSP_ERROR", "GSP error", "RESET_GPU"),
    136: Xid("ALI_TRAINING_FAIL", "NVLink training failed", "RESET_GPU"),
    140: Xid("UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered error", "RESET_GPU"),
    143: Xid("GPU_INIT_ERROR", "GPU initialisation error", "RESET_GPU"),
    144: Xid("NVLINK_SAW_ERROR", "NVLink: SAW error", "WORKFLOW_NVLINK5_ERR"),
    145: Xid("NVLINK_RLW_ERROR", "NVLink: RLW error", "WORKFLOW_NVLINK5_ERR"),
    146: Xid("NVLINK_TLW_ERROR", "NVLink: TLW error", "WORKFLOW_NVLINK5_ERR"),
    147: Xid("NVLINK_TREX_ERROR", "NVLink: TREX error", "WORKFLOW_NVLINK5_ERR"),
    148: Xid("NVLINK_NVLPW_CTRL_ERROR", "NVLink: NVLPW_CTRL error", "WORKFLOW_NVLINK5_ERR"),
    149: Xid("NVLINK_NETIR_ERROR", "NVLink: NETIR error", "WORKFLOW_NVLINK5_ERR"),
    150: Xid("NVLINK_MSE_ERROR", "NVLink: MSE error", "WORKFLOW_NVLINK5_ERR"),
    154: Xid("GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", "as the Xid before it"),
    155: Xid("NVLINK_SW_DEFINED_ERROR", "NVLink: SW defined error", "RESET_GPU"),
    158: Xid("GPU_FATAL_TIMEOUT", "GPU fatal timeout", "RESET_GPU"),
}

# the GPU itself is at fault or left unusable: drain its work and reset it. 94 is a memory
# error contained to one application, whose failing row the GPU remaps only at its next reset
RESET = frozenset(
    {46, 48, 62, 64, 74, 79, 94, 95, 109, 110, 119, 120, 136, 140, 143, 155, 158}
    | set(range(144, 151))
)
# most often the application's own fault: an illegal instruction or address in a kernel (13,
# 31), a channel torn down after its process's error (43, 45)
APPLICATION = frozenset({8, 11, 13, 25, 31, 32, 43, 45, 69})
NVLINK = frozenset({74, 136, 155} | set(range(144, 151)))


class Seen(NamedTuple):
    xid: int
    process: str | None  # "name (pid N)" where the driver named the process


def sightings(log: Log) -> list[Seen]:
    """Each XID the paste shows, first time each, in order: the driver's lines, the earlier XID
    an Xid 45 names, gpud's reasons, the device plugin's, 79 for the driver's GPU-lost line."""
    seen: dict[int, Seen] = {}
    for k in log.candidates(_ANY, 0, windows=False):
        text = log.lines[k].text
        for m in _LINE.finditer(text):
            name, pid = (m.group("name") or "").strip(), (m.group("pid") or "").strip(" '")
            known = name and name != "<unknown>"
            process = f"{name} (pid {pid})" if known else None
            seen.setdefault(int(m.group("xid")), Seen(int(m.group("xid")), process))
        # the lines that name an XID but no process
        for rx in _NAMED_ONLY:
            for m in rx.finditer(text):
                seen.setdefault(int(m.group("xid")), Seen(int(m.group("xid")), None))
        if _LOST.search(text):
            seen.setdefault(79, Seen(79, None))
    return list(seen.values())


def describe(s: Seen) -> str:
    entry = CATALOGUE.get(s.xid)
    if entry is None:
        return f"Xid {s.xid}: not among the codes gameday knows; see NVIDIA's Xid catalogue"
    return (
        f"Xid {s.xid} ({entry.mnemonic}): {entry.description}; NVIDIA's immediate action: "
        f"{entry.action}"
    )


def advice(log: Log) -> list[str]:
    """A line per XID the paste shows (NVIDIA's meaning), then what to do: a GPU at fault is
    drained and reset; an application's fault is looked for in the process the driver names."""
    found = sightings(log)
    if not found:
        return []
    lines = [describe(s) for s in found[:MAX_SHOWN]]
    if len(found) > MAX_SHOWN:
        lines.append(f"and {len(found) - MAX_SHOWN} more XIDs")
    codes = {s.xid for s in found}
    if codes & RESET:
        worst = ", ".join(str(x) for x in sorted(codes & RESET))
        lines.append(
            f"Xid {worst}: the GPU is at fault or left unusable: drain the node's work off it and "
            "reset it (nvidia-smi --gpu-reset -i N, or reboot the node); a restart without the "
            "reset lands on the same GPU"
        )
        if codes & NVLINK:
            lines.append(
                "an NVLink error: check the links (nvidia-smi nvlink --status) and, on an "
                "NVSwitch system, the fabric manager's log, before the GPU serves again"
            )
    app = sorted(codes & APPLICATION)
    if app:
        named = sorted({s.process for s in found if s.xid in APPLICATION and s.process})
        who = f" ({', '.join(named)})" if named else ""
        lines.append(
            f"Xid {', '.join(str(x) for x in app)}: most often the application's own fault (an "
            f"illegal address or instruction in a kernel, or its channel torn down after another "
            f"error): read the log of the process the driver names{who}; the GPU needs no reset "
            "unless another Xid says so"
        )
    return lines
