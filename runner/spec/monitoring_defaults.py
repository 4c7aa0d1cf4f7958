"""An alert rule, and the lab's monitoring when an inventory says nothing more: the DeepGEMM
crash write-up's alert rules, and the Prometheus and Alertmanager images a container lab runs."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from runner.spec.kinds import Model


class AlertRule(Model):
    name: str
    expr: str
    for_s: Annotated[float, Field(ge=0)] = Field(description="Real-world seconds (scaled).")
    severity: str = "page"
    summary: str = ""
    runbook: str = ""
    procedure: str = Field(default="", description="What the person paged does, in order.")
    log_command: str = Field(default="", description="The command that shows the evidence.")
    runbook_section: str = Field(default="", description="Where the write-up explains it.")
    window_s: Annotated[float, Field(gt=0)] | None = Field(
        default=None,
        description="Real-world seconds that `$window` in expr stands for (scaled, like for_s).",
    )


SEED_RULES = (
    AlertRule(
        name="ServingDown",
        expr='up{job="vllm"} < 1 or absent(up{job="vllm"})',
        for_s=300,
        summary="vLLM serving is down (NoData counts as down)",
        runbook="restart all four nodes together; `docker logs` / `kubectl logs "
        "--previous` on the head; seeds/000 section 8",
        procedure="restart all four together (head and workers at once): a new head does not "
        "bring back the old NCCL process group; exit code 0 means on-failure never fires",
        log_command="docker logs --tail 200 <head container> (Kubernetes: kubectl logs "
        "--previous <head pod>)",
        runbook_section="seeds/000 section 8",
    ),
    AlertRule(
        name="ExporterTargetDown",
        expr='count(up{job=~"node-exporter|gpu-exporter"} == 0) > 0',
        for_s=600,
        severity="warning",
        summary="an exporter target is down: monitoring is half-blind",
        runbook="check scrape targets against the nodes' current addresses; move them to "
        "stable (overlay) addresses; seeds/000 section 7",
        procedure="compare the scrape targets with the nodes' current addresses; scrape the "
        "stable overlay addresses, then reload Prometheus",
        log_command="curl -s <prometheus>/api/v1/targets?state=active (lastError per target)",
        runbook_section="seeds/000 section 7",
    ),
    # seeds/001's watch: the kernel log's lines of a kind counted every 30 s, an alert when the
    # count rises. Here the lines are the NVIDIA driver's XIDs (vllmfacts.xid), counted into
    # node-exporter's textfile collector. It fires while the count rose within the window (6
    # h: an XID needs someone to reset the GPU, and pages until then or for that long); a count
    # that stays (the kernel log keeps its lines until a reboot) stops paging. The seed's "while
    # the server is up" is left out: an XID takes the server down with it.
    AlertRule(
        name="GpuXidError",
        expr="(node_kernel_log_nvrm_xid_lines > 0 unless node_kernel_log_nvrm_xid_lines offset "
        "$window) or (node_kernel_log_nvrm_xid_lines - node_kernel_log_nvrm_xid_lines offset "
        "$window > 0)",
        for_s=0,
        window_s=21600,
        summary="the kernel log has new NVRM Xid lines: a GPU of this node is failing",
        runbook="dmesg | grep NVRM on the node; XID 79 or 48: drain the node, reset the GPU "
        "(nvidia-smi --gpu-reset -i N, or reboot), then start the engine; seeds/001",
        procedure="cordon or drain the node, reset its GPU (nvidia-smi --gpu-reset -i N) or "
        "reboot it, then restart the engine: restarting the engine alone fails on the broken "
        "device",
        log_command="dmesg -T | grep 'NVRM: Xid' (or journalctl -k | grep 'NVRM: Xid')",
        runbook_section="seeds/001 (the kernel-log watch)",
    ),
)


PROMETHEUS_IMAGE = "prom/prometheus:v2.53.1"


ALERTMANAGER_IMAGE = "prom/alertmanager:v0.27.0"
