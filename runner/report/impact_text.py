"""The load's figures as lines of text, the same in the terminal's summary, report.md and
JUnit's properties: per phase, requests sent and failed, p50 and p99 latency, time to first
token; when users saw the fault first and last."""

from __future__ import annotations

from runner.results.schema import ImpactFigures, PhaseFigures


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} ms"


def phase_line(f: PhaseFigures) -> str:
    rate = "-" if f.error_rate is None else f"{f.error_rate:.1%}"
    return (
        f"{f.phase}: {f.sent} sent, {f.failed} failed ({rate}), p50 {_ms(f.p50_ms)}, "
        f"p99 {_ms(f.p99_ms)}, ttft p99 {_ms(f.ttft_p99_ms)}"
    )


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s real"


def seen_line(imp: ImpactFigures) -> str:
    return (
        f"users saw the fault first {_s(imp.users_saw_first_s)} after the fault was in place, "
        f"last {_s(imp.users_saw_last_s)} after the restoring step"
    )


def heading(imp: ImpactFigures) -> str:
    how = f"{imp.rate:g} requests/s" if imp.rate is not None else f"{imp.concurrency} users"
    share = f", the lab's load_scale {imp.load_scale:g}" if imp.load_scale != 1 else ""
    return f"load: {how} to {imp.node} (latency in wall ms from the intended send{share})"


def lines(imp: ImpactFigures) -> list[str]:
    return [heading(imp), *(phase_line(f) for f in imp.phases), seen_line(imp)]


def properties(imp: ImpactFigures) -> dict[str, str]:
    """JUnit properties: gameday.impact.<phase>.{sent,failed,error_rate,p50_ms,p99_ms,
    ttft_p99_ms}, gameday.impact.users_saw_{first,last}_s and, on a lab that carries a share of
    the load, gameday.impact.load_scale; a figure not measured is left out."""
    props: dict[str, str] = {}
    if imp.load_scale != 1:
        props["gameday.impact.load_scale"] = f"{imp.load_scale:g}"
    for f in imp.phases:
        figures = {
            "sent": f.sent,
            "failed": f.failed,
            "error_rate": f.error_rate,
            "p50_ms": f.p50_ms,
            "p99_ms": f.p99_ms,
            "ttft_p99_ms": f.ttft_p99_ms,
        }
        for name, v in figures.items():
            if v is not None:
                props[f"gameday.impact.{f.phase}.{name}"] = (
                    str(v) if isinstance(v, int) else f"{v:.6g}"
                )
    for name, s in (
        ("users_saw_first_s", imp.users_saw_first_s),
        ("users_saw_last_s", imp.users_saw_last_s),
    ):
        if s is not None:
            props[f"gameday.impact.{name}"] = f"{s:.3f}"
    return props
