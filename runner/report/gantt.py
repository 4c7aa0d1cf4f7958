"""A scenario's timeline as an SVG Gantt chart (runner.report.gantt_layout lays it out): lanes,
phase bands, incarnation bars, labelled recovery steps, people's marks, markers, brackets, a
broken axis and a legend of every colour the picture uses. Server-side, no script: every string
is escaped by ElementTree, and full texts are in <title> (shown on hover).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from runner.report.gantt_layout import (
    BREAK_PX,
    MARKERS,
    PEOPLE,
    REQUESTS,
    WIDTH,
    Answer,
    Axis,
    BarState,
    Layout,
    PersonKind,
    RequestBin,
    StepOutcome,
)
from runner.results.durations import real_s
from runner.results.schema import EventKind

FONT_PX = 11
CHAR_PX = 7.0  # a generous width of one character at FONT_PX (labels are placed with it)
ROW_H = 15  # a row of labels (markers, phases, brackets, legend)
LANE_H = 24
MARK_ROWS = 2
PHASE_COLOURS = {
    "baseline": "#e8f1e4",
    "inject": "#fbe3cf",
    "expect": "#f8d9d9",
    "detect": "#fff1c2",
    "recover": "#dde8fa",
    "verify": "#d9f0ea",
    "cleanup": "#ececec",
}
BAR_COLOURS = {
    BarState.STARTING: "#9cc3e6",
    BarState.RUNNING: "#3a7bd5",
    BarState.UNREADY: "#e0a030",
    BarState.CRASHED: "#c0392b",
    BarState.BACKOFF: "#8e8e8e",
    BarState.STOPPED: "#d5d5d5",
}
STEP_COLOURS = {
    StepOutcome.RESTORED: "#17702a",
    StepOutcome.NOT_RESTORED: "#b3141b",
    StepOutcome.MASKED: "#b7950b",
}
PERSON_COLOURS = {PersonKind.ACK: "#117a65", PersonKind.HINT: "#7d3c98"}
ANSWER_COLOURS = {
    Answer.OK: "#8fd19e",
    Answer.ERROR: "#e377c2",
    Answer.TIMEOUT: "#9467bd",
    Answer.NO_CONNECTION: "#ff7f0e",
}
LATENCY_COLOUR = "#1f3b73"
LATENCY_AXIS_PX = 64  # right of the time axis: the latency line's own scale
STRIP_H = 18.0  # px of the requests' lane the strip fills
BREAK_COLOUR = "#666"
# a white outline under a label drawn over bars and breaks, so it reads on any of them
HALO = {"stroke": "#ffffff", "stroke_width": 3, "paint_order": "stroke", "stroke_linejoin": "round"}
TICK_COLOUR = "#555"
MARK_COLOURS = {
    EventKind.INJECT: "#d35400",
    EventKind.FAIL: "#b3141b",
    EventKind.ALERT: "#8e44ad",
    EventKind.RESTORED: "#17702a",
}


def text_px(text: str) -> float:
    return len(text) * CHAR_PX


def place(centre: float, text: str, lo: float, hi: float) -> float:
    """The x at which `text`, centred on `centre` where it can be, starts inside [lo, hi]."""
    w = text_px(text)
    return max(lo, min(centre - w / 2, hi - w))


def _el(parent: ET.Element, tag: str, title: str | None = None, **attrs: object) -> ET.Element:
    el = ET.SubElement(
        parent, tag, {k.rstrip("_").replace("_", "-"): _attr(v) for k, v in attrs.items()}
    )
    if title is not None:
        ET.SubElement(el, "title").text = title
    return el


def _attr(v: object) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def _text(parent: ET.Element, x: float, y: float, text: str, **attrs: object) -> ET.Element:
    el = _el(parent, "text", None, x=x, y=y, **attrs)
    el.text = text
    return el


@dataclass
class _Canvas:
    lay: Layout
    axis: Axis
    root: ET.Element
    lanes_y: float  # top of the first lane

    def lane_mid(self, lane: str) -> float:
        return self.lanes_y + LANE_H * self.lay.lanes.index(lane) + LANE_H / 2

    @property
    def lanes_bottom(self) -> float:
        return self.lanes_y + LANE_H * len(self.lay.lanes)

    def at(self, t: float) -> str:
        return "+" + real_s(t, self.lay.time_scale)


def svg(lay: Layout, label: str) -> str:
    """The picture as an <svg> element (inline in the page); `label`: its accessible name."""
    label_px = min(max(max(text_px(n) for n in lay.lanes) + 14, 80.0), 170.0)
    right = WIDTH - 12 - (LATENCY_AXIS_PX if lay.requests else 0)
    axis = Axis(label_px, right, lay.span_s, lay.breaks)
    lanes_y = ROW_H * (MARK_ROWS + 1) + 6
    axis_rows = 2 if lay.breaks else 1
    legend_rows = _legend_rows(lay)
    height = lanes_y + LANE_H * len(lay.lanes) + ROW_H * (1 + axis_rows + len(lay.brackets))
    height += ROW_H * legend_rows
    height += 10
    root = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "class": "gantt",
            "width": str(WIDTH),
            "height": f"{height:.0f}",
            "viewBox": f"0 0 {WIDTH} {height:.0f}",
            "role": "img",
            "aria-label": label,
            "font-size": str(FONT_PX),
        },
    )
    ET.SubElement(root, "title").text = f"{label} (real-world seconds since the scenario began)"
    c = _Canvas(lay, axis, root, lanes_y)
    _draw_bands(c)
    _draw_lanes(c, label_px)
    _draw_bars(c)
    _draw_requests(c)
    _draw_ticks(c)
    _draw_breaks(c)
    _draw_steps(c)
    _draw_people(c)
    _draw_markers(c)
    y = _draw_axis(c)
    y = _draw_brackets(c, y)
    _draw_legend(c, y)
    return ET.tostring(root, encoding="unicode")


def _draw_bands(c: _Canvas) -> None:
    g = _el(c.root, "g", class_="bands")
    y_label = c.lanes_y - 4
    for b in c.lay.bands:
        x0, x1 = c.axis.x(b.start_s), c.axis.x(b.end_s)
        tip = f"{b.text}: {c.at(b.start_s)} to {c.at(b.end_s)}"
        fill = PHASE_COLOURS.get(b.phase, "#f4f4f4")
        _el(
            g,
            "rect",
            tip,
            x=x0,
            y=y_label - ROW_H + 4,
            width=max(x1 - x0, 1.0),
            height=c.lanes_bottom - y_label + ROW_H - 4,
            fill=fill,
            class_="band",
        )
        if text_px(b.phase) + 4 <= x1 - x0:
            _text(g, x0 + 2, y_label, b.phase, class_="phase")


def _draw_lanes(c: _Canvas, label_px: float) -> None:
    g = _el(c.root, "g", class_="lanes")
    for i, lane in enumerate(c.lay.lanes):
        y = c.lanes_y + LANE_H * i
        _el(g, "line", x1=0, y1=y + LANE_H, x2=WIDTH, y2=y + LANE_H, stroke="#d0d0d0")
        fit = {}
        if text_px(lane) > label_px - 10:  # a long name is squeezed to fit, never cut
            fit = {"textLength": label_px - 10, "lengthAdjust": "spacingAndGlyphs"}
        el = _text(g, 4, y + LANE_H / 2 + 4, lane, class_="lane", **fit)
        ET.SubElement(el, "title").text = lane


def _draw_bars(c: _Canvas) -> None:
    g = _el(c.root, "g", class_="bars")
    for b in c.lay.bars:
        x0, x1 = c.axis.x(b.start_s), c.axis.x(b.end_s)
        inc = f" incarnation {b.incarnation}" if b.incarnation is not None else ""
        tip = (
            f"{b.lane}{inc}: {b.state.value} from {c.at(b.start_s)} to {c.at(b.end_s)} "
            f"({real_s(b.end_s - b.start_s, c.lay.time_scale)})"
        )
        _el(
            g,
            "rect",
            tip,
            x=x0,
            y=c.lane_mid(b.lane) - 6,
            width=max(x1 - x0, 1.5),
            height=12,
            fill=BAR_COLOURS[b.state],
            class_=f"bar {b.state.value}",
            data_lane=b.lane,
        )


def _draw_requests(c: _Canvas) -> None:
    """The load's requests lane: per stretch of send times, a column split by how the requests
    came out (successes at the bottom, each kind of failure above, as shares of the stretch),
    and over it the p99 latency of the successes as a line on its own axis, right of the time
    axis (0 at the strip's bottom, the largest p99 at its top)."""
    if not c.lay.requests:
        return
    g = _el(c.root, "g", class_="requests")
    bottom = c.lane_mid(REQUESTS) + STRIP_H / 2
    for b in c.lay.requests:
        x0, x1 = c.axis.x(b.start_s), c.axis.x(b.end_s)
        told = ", ".join(f"{n} {a.value}" for a, n in b.answers)
        p99 = f"; p99 {b.p99_ms:.1f} ms" if b.p99_ms is not None else ""
        bg = _el(g, "g", f"{c.at(b.start_s)}: {b.sent} sent: {told}{p99}", class_="request-bin")
        y = bottom
        for a, n in b.answers:
            h = STRIP_H * n / b.sent
            y -= h
            _el(
                bg,
                "rect",
                x=x0,
                y=y,
                width=max(x1 - x0, 1.0) + 0.4,  # over the next one's edge: no seam
                height=h,
                fill=ANSWER_COLOURS[a],
                class_=f"answer {a.name.lower()}",
            )
    top_ms = max((b.p99_ms for b in c.lay.requests if b.p99_ms is not None), default=None)
    if not top_ms:
        return
    d = " ".join(
        " ".join(
            ("M" if i == 0 else "L")
            + f"{c.axis.x((b.start_s + b.end_s) / 2):.1f},"
            + f"{bottom - STRIP_H * (b.p99_ms or 0.0) / top_ms:.1f}"
            for i, b in enumerate(run)
        )
        for run in _latency_runs(c.lay.requests, c.lay.breaks)
    )
    what = "p99 latency of the requests that succeeded, wall ms"
    _el(
        g, "path", what, d=d, stroke=LATENCY_COLOUR, fill="none", stroke_width=1.5, class_="latency"
    )
    ax = _el(g, "g", f"{what}: 0 to {top_ms:.1f}", class_="latency-axis")
    x = c.axis.x1 + 6
    _el(ax, "path", d=f"M{x:.1f},{bottom - STRIP_H:.1f} V{bottom:.1f}", stroke=LATENCY_COLOUR)
    for y, text in ((bottom - STRIP_H + 7, f"{top_ms:.0f} ms"), (bottom, "0")):
        _text(ax, x + 3, y, text, fill=LATENCY_COLOUR, font_size=9, class_="latency-label")


def _latency_runs(
    bins: tuple[RequestBin, ...], breaks: tuple[tuple[float, float], ...]
) -> list[list[RequestBin]]:
    """The stretches the latency line joins: one with no success, a stretch with no request,
    or an axis break between two ends the line there."""
    runs: list[list[RequestBin]] = []
    prev: RequestBin | None = None
    for b in bins:
        if b.p99_ms is None:
            prev = None
            continue
        joined = (
            prev is not None
            and b.start_s - prev.end_s < 1e-6
            and not any(prev.end_s <= a < b.end_s for a, _ in breaks)
        )
        if joined:
            runs[-1].append(b)
        else:
            runs.append([b])
        prev = b
    return runs


def _draw_ticks(c: _Canvas) -> None:
    g = _el(c.root, "g", class_="ticks")
    for m in c.lay.ticks:
        tip = f"{c.at(m.at_s)} {m.lane}: {m.text}"
        _el(
            g,
            "circle",
            tip,
            cx=c.axis.x(m.at_s),
            cy=c.lane_mid(m.lane) + 9,
            r=2.2,
            fill=TICK_COLOUR,
            class_=f"tick {m.kind.value}",
        )


def _zigzag(x: float, top: float, bottom: float) -> str:
    """A vertical zig-zag at x: a break's edge, which no tick or marker line looks like."""
    pts, y, side = [f"M{x:.1f},{top:.1f}"], top, 1
    while y < bottom:
        y = min(y + 5, bottom)
        pts.append(f"L{x + 3 * side:.1f},{y:.1f}")
        side = -side
    return " ".join(pts)


def _draw_breaks(c: _Canvas) -> None:
    """Each compressed gap: shaded over the lanes, a zig-zag at either edge, the axis line
    interrupted under it (_draw_axis), and the time it leaves out written below."""
    g = _el(c.root, "g", class_="breaks")
    for a, b in c.lay.breaks:
        x = c.axis.x(a)
        tip = f"axis broken: {real_s(b - a, c.lay.time_scale)} left out ({c.at(a)} to {c.at(b)})"
        top, bottom = c.lanes_y, c.lanes_bottom + 6  # below the phase names, through the axis
        bg = _el(g, "g", tip, class_="break")
        _el(
            bg,
            "rect",
            x=x + 5,
            y=top,
            width=BREAK_PX - 10,
            height=bottom - top,
            fill="#f6f6f6",
            fill_opacity="0.9",
        )
        for dx in (5, BREAK_PX - 5):
            _el(bg, "path", d=_zigzag(x + dx, top, bottom), stroke=BREAK_COLOUR, fill="none")


def _step_text(c: _Canvas, text: str) -> tuple[float, dict[str, object]]:
    """Where a step's label starts, and how it fits: every label at the rows' left, so they read
    as one column (in a narrow window, before the picture is scrolled), squeezed (never cut)
    where the row is too short for it. Its bar shows when the step ran."""
    room = WIDTH - 4 - (c.axis.x0 + 2)
    if text_px(text) > room:
        return c.axis.x0 + 2, {"textLength": room, "lengthAdjust": "spacingAndGlyphs"}
    return c.axis.x0 + 2, {}


def _draw_steps(c: _Canvas) -> None:
    """A row per step: a bar from its start to its end in its outcome's colour, a start mark,
    and its label (role, name, outcome) in the row."""
    g = _el(c.root, "g", class_="steps")
    for st in c.lay.steps:
        x0, x1 = c.axis.x(st.start_s), c.axis.x(st.end_s)
        mid, colour = c.lane_mid(st.row), STEP_COLOURS[st.outcome]
        tip = f"{st.row} at {c.at(st.start_s)}: {st.label}" + (
            f" ({st.detail})" if st.detail else ""
        )
        sg = _el(g, "g", tip, class_=f"step {st.role.value}", data_outcome=st.outcome.value)
        _el(sg, "rect", x=x0, y=mid + 3, width=max(x1 - x0, 2.0), height=6, fill=colour)
        _el(sg, "path", d=f"M{x0:.1f},{mid - 9:.1f} V{mid + 9:.1f}", stroke=colour)
        tx, fit = _step_text(c, st.label)
        _text(sg, tx, mid, st.label, fill=colour, class_="step-label", **HALO, **fit)


def _draw_people(c: _Canvas) -> None:
    """The people's lane: a triangle per acknowledgement and hint, named beside it where the
    name has room (the hover text carries it always)."""
    g = _el(c.root, "g", class_="people")
    end = 0.0
    for p in c.lay.people:
        x, y, colour = c.axis.x(p.at_s), c.lane_mid(PEOPLE), PERSON_COLOURS[p.kind]
        tip = f"{p.text} at {c.at(p.at_s)}" + (f": {p.detail}" if p.detail else "")
        pg = _el(g, "g", tip, class_=f"person {p.kind.value.split()[0]}")
        _el(pg, "path", d=f"M{x:.1f},{y - 7:.1f} l6,12 l-12,0 z", fill=colour)
        if x + 9 >= end and x + 9 + text_px(p.text) <= WIDTH:
            _text(pg, x + 9, y + 4, p.text, fill=colour, class_="person-label", **HALO)
            end = x + 9 + text_px(p.text) + 4


def _draw_markers(c: _Canvas) -> None:
    g = _el(c.root, "g", class_="markers")
    row_end = [0.0] * MARK_ROWS
    for m in c.lay.marks:
        x, colour, name = c.axis.x(m.at_s), MARK_COLOURS[m.kind], MARKERS[m.kind]
        tip = f"{name} at {c.at(m.at_s)}, {m.lane}: {m.text}"
        mg = _el(g, "g", tip, class_=f"marker {m.kind.value}")
        _el(
            mg,
            "line",
            x1=x,
            y1=ROW_H * MARK_ROWS + 2,
            x2=x,
            y2=c.lanes_bottom,
            stroke=colour,
            stroke_dasharray="4 3",
        )
        y = c.lane_mid(m.lane)
        _el(mg, "path", d=f"M{x:.1f},{y - 7:.1f} l6,7 l-6,7 l-6,-7 z", fill=colour)
        tx = place(x, name, 0, WIDTH)
        row = next((i for i, end in enumerate(row_end) if tx >= end + 4), MARK_ROWS - 1)
        row_end[row] = tx + text_px(name)
        _text(mg, tx, ROW_H * (row + 1) - 3, name, fill=colour, class_="marker-label")


def _axis_labels(c: _Canvas) -> list[tuple[float, str]]:
    """(x, text): the axis's ends and the times where each break begins and ends."""
    out = [(c.axis.x(t), _plus(t)) for t in (0.0, c.lay.span_s)]
    for a, b in c.lay.breaks:
        out += [(c.axis.x(a), _plus(a)), (c.axis.x(b), _plus(b))]
    return sorted(out)


def _plus(t: float) -> str:
    return f"+{t:.0f} s" if t >= 10 else f"+{t:.1f} s"


def _draw_axis(c: _Canvas) -> float:
    """The axis under the lanes, interrupted at each break, labelled where it begins, breaks
    and ends (a label that would touch the previous one is left out: the hover texts carry
    every time); under it, in italics, the time each break leaves out. Returns the next y."""
    g = _el(c.root, "g", class_="axis")
    y = c.lanes_bottom
    x = c.axis.x0
    for a, b in c.lay.breaks:
        _el(g, "line", x1=x, y1=y, x2=c.axis.x(a) + 5, y2=y, stroke="#555")
        x = c.axis.x(b) - 5
    _el(g, "line", x1=x, y1=y, x2=c.axis.x1, y2=y, stroke="#555")
    taken: list[tuple[float, float]] = []
    for x, text in _axis_labels(c):
        tx = place(x, text, 0, WIDTH)
        span = (tx - 6, tx + text_px(text) + 6)
        if any(span[0] < b and a < span[1] for a, b in taken):
            continue
        taken.append(span)
        _el(g, "line", x1=x, y1=y, x2=x, y2=y + 4, stroke="#555")
        _text(g, tx, y + ROW_H, text, class_="axis-label")
    if not c.lay.breaks:
        return y + ROW_H + 4
    y += 2 * ROW_H
    ends: list[float] = []
    for a, b in c.lay.breaks:
        text = f"{_secs(b - a)} skipped"
        tx = place(c.axis.x(a) + BREAK_PX / 2, text, 0, WIDTH)
        if any(tx - 6 < e for e in ends):
            text = _secs(b - a)  # a short one where the long one would touch its neighbour
            tx = place(c.axis.x(a) + BREAK_PX / 2, text, 0, WIDTH)
        ends.append(tx + text_px(text))
        _text(g, tx, y, text, class_="gap-label", font_style="italic", fill=BREAK_COLOUR)
    return y + 4


def _secs(s: float) -> str:
    return f"{s:.0f} s"


def _draw_brackets(c: _Canvas, y: float) -> float:
    g = _el(c.root, "g", class_="brackets")
    for b in c.lay.brackets:
        y += ROW_H
        x0, x1 = c.axis.x(b.start_s), c.axis.x(b.end_s)
        text = f"{b.name} {real_s(b.end_s - b.start_s, c.lay.time_scale)}"
        bg = _el(g, "g", f"{text}: {c.at(b.start_s)} to {c.at(b.end_s)}", class_="bracket")
        _el(
            bg,
            "path",
            d=f"M{x0:.1f},{y - 9:.1f} V{y - 4:.1f} H{x1:.1f} V{y - 9:.1f}",
            stroke="#333",
            fill="none",
            stroke_width="1.5",
        )
        w = text_px(text)
        if x1 + 6 + w <= WIDTH:
            _text(bg, x1 + 6, y, text, class_="bracket-label")
        elif x0 - 6 - w >= 0:
            # anchored at its end, so it meets the bracket whatever the font's real widths
            _text(bg, x0 - 6, y, text, class_="bracket-label", text_anchor="end")
        else:
            _text(bg, place((x0 + x1) / 2, text, 0, WIDTH), y, text, class_="bracket-label")
    return y + 6


def _legend_items(lay: Layout) -> list[tuple[str, str, str]]:
    """(shape, colour, text) for every colour the picture uses, and nothing it does not."""
    items = [("band", PHASE_COLOURS.get(b.phase, "#f4f4f4"), f"phase {b.phase}") for b in lay.bands]
    states = {b.state for b in lay.bars}
    items += [("rect", BAR_COLOURS[st], st.value) for st in BarState if st in states]
    outcomes = {st.outcome for st in lay.steps}
    items += [("step", STEP_COLOURS[o], f"step: {o.value}") for o in StepOutcome if o in outcomes]
    people = {p.kind for p in lay.people}
    items += [("person", PERSON_COLOURS[k], k.value) for k in PersonKind if k in people]
    answers = {a for b in lay.requests for a, _ in b.answers}
    items += [("rect", ANSWER_COLOURS[a], f"request: {a.value}") for a in Answer if a in answers]
    if any(b.p99_ms for b in lay.requests):
        items.append(("line", LATENCY_COLOUR, "p99 latency of successes (right-hand axis)"))
    items += [("marker", MARK_COLOURS[m.kind], MARKERS[m.kind]) for m in lay.marks]
    if lay.ticks:
        items.append(("tick", TICK_COLOUR, "an event (hover for its text)"))
    if lay.breaks:
        items.append(("break", BREAK_COLOUR, "axis broken: the quiet time left out"))
    return list(dict.fromkeys(items))


def _legend_rows(lay: Layout) -> int:
    rows, x = 1, 4.0
    for _, _, text in _legend_items(lay):
        w = 18 + text_px(text)
        if x + w > WIDTH:
            rows, x = rows + 1, 4.0
        x += w + 12
    return rows


def _draw_legend(c: _Canvas, y: float) -> None:
    g = _el(c.root, "g", class_="legend")
    x, y = 4.0, y + ROW_H
    for shape, colour, text in _legend_items(c.lay):
        w = 18 + text_px(text)
        if x + w > WIDTH:
            x, y = 4.0, y + ROW_H
        item = _el(g, "g", class_=f"legend-item legend-{shape}", data_colour=colour)
        if shape in ("rect", "band"):
            stroke = {"stroke": "#bbb"} if shape == "band" else {}
            _el(item, "rect", x=x, y=y - 9, width=12, height=10, fill=colour, **stroke)
        elif shape == "step":
            _el(item, "rect", x=x, y=y - 5, width=12, height=5, fill=colour)
        elif shape == "marker":
            _el(item, "path", d=f"M{x + 6:.1f},{y - 10:.1f} l6,6 l-6,6 l-6,-6 z", fill=colour)
        elif shape == "person":
            _el(item, "path", d=f"M{x + 6:.1f},{y - 10:.1f} l6,11 l-12,0 z", fill=colour)
        elif shape == "tick":
            _el(item, "circle", cx=x + 6, cy=y - 4, r=2.2, fill=colour)
        elif shape == "line":
            _el(item, "path", d=f"M{x:.1f},{y - 4:.1f} h12", stroke=colour, stroke_width=1.5)
        else:
            _el(item, "path", d=_zigzag(x + 6, y - 11, y + 1), stroke=colour, fill="none")
        _text(item, x + 16, y, text)
        x += w + 12
