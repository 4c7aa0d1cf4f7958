"""`gameday history --html`: a page with each scenario's times over runs, as a table and a small
inline SVG chart (real-world seconds: a drill's people's wall seconds are real-world seconds
as they are, so that one axis holds one unit; a hollow red ring marks a regression in time to
recover). Every value is escaped (Jinja2 autoescape)."""

from __future__ import annotations

from dataclasses import dataclass

from runner.report.templating import ENV
from runner.results.schema import RunMode
from runner.results.trends import History, Measure, Point, Trend, people, shown

WIDTH, HEIGHT, PAD = 560, 180, 40
COLOURS = {Measure.FAIL: "#b3141b", Measure.DETECT: "#a35c00", Measure.RECOVER: "#1f5fbf"}
LABELS = {
    Measure.FAIL: "time to fail",
    Measure.DETECT: "time to detect",
    Measure.RECOVER: "time to recover",
}


@dataclass(frozen=True)
class Series:
    label: str
    colour: str
    points: list[tuple[float, float, str]]  # x, y, tooltip


@dataclass(frozen=True)
class Chart:
    series: list[Series]
    regressions: list[tuple[float, float]]
    y_max: float  # seconds at the top of the axis
    x_labels: list[tuple[float, str]]


def chart(trend: Trend) -> Chart:
    """The trend in SVG coordinates: one series per measure, x by run, y in seconds from 0."""
    pts = trend.points
    values = [getattr(p, m.value) for p in pts for m in Measure]
    top = max((v for v in values if v is not None), default=0.0)
    y_max = top * 1.1 if top > 0 else 1.0  # all times 0 (or none) still need a y range
    step = (WIDTH - 2 * PAD) / max(len(pts) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return PAD + i * step, HEIGHT - PAD - v / y_max * (HEIGHT - 2 * PAD)

    series = []
    for m in Measure:
        coords = [
            (*xy(i, v), f"{_name(p)}: {LABELS[m]} {shown(p, m)}")
            for i, p in enumerate(pts)
            if (v := getattr(p, m.value)) is not None
        ]
        if coords:
            series.append(Series(LABELS[m], COLOURS[m], coords))
    regressions = [
        xy(i, p.time_to_recover_s or 0.0) for i, p in enumerate(pts) if p.recover_regressed
    ]
    labels = [(PAD + i * step, p.started_at.strftime("%m-%d %H:%M")) for i, p in enumerate(pts)]
    return Chart(series, regressions, y_max, labels)


def _name(p: Point) -> str:
    return p.run_id if p.mode is RunMode.RUN else f"{p.run_id} ({p.mode.value})"


def change(p: Point, m: Measure) -> str:
    """`m`'s change against the point of the same mode before, in the unit of its figure."""
    d = p.change_s.get(m)
    if d is None:
        return ""
    return f"{d:+.1f} s" + (" wall" if people(p, m) else "")


def html(history: History) -> str:
    return ENV.get_template("history.html.j2").render(
        h=history,
        charts={t.scenario: chart(t) for t in history.trends},
        shown=shown,
        change=change,
        measures=list(Measure),
        labels=LABELS,
        width=WIDTH,
        height=HEIGHT,
        pad=PAD,
    )
