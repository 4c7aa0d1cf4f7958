"""bench/overhead.py: a scenario's wall time split from its timeline, each second counted once."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from overhead import CATEGORIES, split  # noqa: E402

from runner.spec.scenario import load_scenario  # noqa: E402

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def result(end: float, events: list[tuple[float, str, str]]) -> dict[str, Any]:
    return {
        "started_at": T0.isoformat(),
        "finished_at": (T0 + timedelta(seconds=end)).isoformat(),
        "timeline": [
            {"ts": (T0 + timedelta(seconds=t)).isoformat(), "source": src, "event": text}
            for t, src, text in events
        ],
    }


def test_a_shortcut_that_hangs() -> None:
    """tp-mismatch's shape: a failing start, a shortcut left to settle 400 s (4 s at x100), the
    fix's boot, with process starts, a stop and the runner's probes in between."""
    sc = load_scenario(ROOT / "scenarios" / "tp-mismatch.yaml").scenario
    r = result(
        9.0,
        [
            (0.0, "runner", "phase baseline"),
            (0.1, "runner", "inject: serving: args ..."),
            (0.2, "lab:serving", "started incarnation 2 pid 1"),
            (0.3, "lab:serving", "first_output"),
            (0.5, "lab:serving", "exited with code 1 (incarnation 2)"),
            (0.6, "runner", "recover 1: serving: args ..."),
            (0.6, "lab:serving", "started incarnation 3 pid 2"),
            (0.7, "lab:serving", "first_output"),
            # settle window 0.6 .. 4.7 (400 s / 100 + 0.1 allowance); probes until 5.3
            (5.5, "lab:serving", "stopped by the lab to re-apply (exit 143, incarnation 3, "
                                 "0.200 s after SIGTERM)"),
            (5.6, "lab:serving", "started incarnation 4 pid 3"),
            (5.7, "lab:serving", "first_output"),
            (8.0, "lab:serving", "ready"),
        ],
    )  # fmt: skip
    part = split(r, sc, 100, 0.1)
    assert list(part) == list(CATEGORIES)
    assert sum(part.values()) == pytest.approx(9.0)
    # engine phases 0.3-0.5 and 5.7-8.0, the settle window 0.6-4.7
    assert part["scaled"] == pytest.approx(0.2 + 4.1 + 2.3)
    # spawns 0.2-0.3, 5.6-5.7 (0.6-0.7 is inside the settle window); the stop 5.3-5.5
    assert part["process start/stop"] == pytest.approx(0.1 + 0.1 + 0.2)
    assert part["Prometheus loads"] == 0
    # what is left: 0-0.2, 0.5-0.6, 4.7-5.3, 5.5-5.6, 8.0-9.0
    assert part["runner and lab control"] == pytest.approx(0.2 + 0.1 + 0.6 + 0.1 + 1.0)


def test_an_alert_and_a_prometheus_reload() -> None:
    sc = load_scenario(ROOT / "scenarios" / "dhcp-address-change.yaml").scenario
    r = result(
        10.0,
        [
            (0.1, "runner", "inject: node3: management address a -> b"),
            (6.1, "prometheus", "alert ExporterTargetDown firing"),
            (6.2, "runner", "recover 2: lab: node-exporter scrape network -> overlay"),
            (9.0, "prometheus", "configuration reloaded, every target scraped 2.50 s later"),
        ],
    )  # fmt: skip
    part = split(r, sc, 100, 0.1)
    assert part["scaled"] == pytest.approx(6.0)  # the fault until the alert fires
    assert part["Prometheus loads"] == pytest.approx(2.5)
    assert part["runner and lab control"] == pytest.approx(10.0 - 6.0 - 2.5)
