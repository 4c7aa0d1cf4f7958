"""bench/instance_cost.py: the CPU figures `--parallel auto` reads leave the lab's bring-up out
(every instance comes up at once, and no window is judged while it does)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from instance_cost import TICK, Sampler, scenarios_span  # noqa: E402

SAID = [
    (0.0, "   0.01s bringing up lab 'local'\n"),
    (3.0, "   2.98s [context-window-overflow] starting\n"),
    (8.0, "   7.88s [dhcp-address-change] starting\n"),
    (20.0, "  19.9s taking lab 'local' down\n"),
]


def test_the_span_runs_from_the_first_scenarios_start_to_the_lab_going_down() -> None:
    assert scenarios_span(SAID) == (3.0, 20.0)
    assert scenarios_span(SAID[:1]) is None  # no scenario ran: the whole run


def test_a_bring_up_peak_is_not_the_instances_peak() -> None:
    sampler = Sampler(roots=list, runner_pid=0)
    ticks = 0
    for i in range(0, 41):  # every 0.5 s for 20 s: 2 cores busy during the first 3 s, then 0.5
        t = i * 0.5
        sampler.series.append((t, ticks))
        ticks += int(TICK * (1.0 if t < 3.0 else 0.25))
    whole = sampler.figures(5)
    scenarios = sampler.figures(5, scenarios_span(SAID))
    assert whole["cpu_peak"] == 2.0
    assert scenarios["cpu_peak"] == 0.5
    assert scenarios["cpu_mean"] == 0.5
