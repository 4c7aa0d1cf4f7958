"""Evidence of the lab's state at one moment, beyond the logs: the GPU process list, the
runtime's events about the target (Kubernetes Events) and Prometheus's target table."""

from __future__ import annotations

from runner.errors import GamedayError
from runner.results.schema import Evidence, EvidenceLine
from runner.run import prometheus_api as prometheus
from runner.run.context import Context, utcnow
from runner.spec.probes import GpuProcessesProbe, TargetsProbe
from runner.spec.scenario import LoadedScenario


def capture_evidence(ctx: Context, ls: LoadedScenario, when: str) -> None:
    sc = ls.scenario
    probes = [*sc.baseline.probes, *sc.expect.probes, *sc.verify.probes]
    gpu_nodes = sorted({p.node for p in probes if isinstance(p, GpuProcessesProbe)})
    for node in gpu_nodes:
        gpu_processes(ctx, node, when)
    runtime_events(ctx, when)
    jobs = sorted({p.job for p in probes if isinstance(p, TargetsProbe)})
    if jobs:
        prometheus_targets(ctx, jobs, when)


def gpu_processes(ctx: Context, node: str, when: str) -> None:
    now = utcnow()
    try:
        procs = ctx.lab.gpu_processes(node)
    except GamedayError:
        return
    lines = [
        EvidenceLine(ts=now, text=f"pid {p.pid:>8}  {p.name:<40} {p.mib:>7} MiB") for p in procs
    ] or [EvidenceLine(ts=now, text="no GPU processes")]
    ctx.rec.evidence.append(Evidence(title=f"GPU processes on {node} {when}", lines=lines))


def runtime_events(ctx: Context, when: str) -> None:
    try:
        title, events = ctx.lab.runtime_events(ctx.target)
    except GamedayError:
        return
    if events:
        ctx.rec.evidence.append(
            Evidence(
                title=f"{title} {when}",
                lines=[EvidenceLine(ts=e.ts, text=e.text, highlight=e.warning) for e in events],
            )
        )


def prometheus_targets(ctx: Context, jobs: list[str], when: str) -> None:
    try:
        url = ctx.lab.prometheus_url()
    except GamedayError:
        return  # no Prometheus to ask now: the probes' own results say so
    if url is None:
        return
    now = utcnow()
    lines = []
    for job in jobs:
        try:
            got = prometheus.targets(ctx.http, url, job)
        except GamedayError as exc:
            lines.append(EvidenceLine(ts=now, text=f"{job}: {exc.message}"))
            continue
        for node, t in sorted(got.items()):
            lines.append(
                EvidenceLine(
                    ts=now,
                    highlight=t["health"] != "up",
                    text=f"{job:<14} {node:<8} {t['health']:<5} {t['scrapeUrl']:<40} "
                    f"{t['lastError']}",
                )
            )
    ctx.rec.evidence.append(Evidence(title=f"Prometheus targets {when}", lines=lines))
