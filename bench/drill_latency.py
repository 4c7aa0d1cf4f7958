"""The latency from a drill's bus event to its live page, in a real headless Chromium.

A DrillBus and the page server run in this process; the page is opened in Debian's chromium
(through its chromedriver, as tests/e2e/test_drill_page.py does). Each of N events carries its
publication time (`ts`); the page's script records Date.now() when the event arrives, and the
two are compared (one machine, one clock). Events are spaced apart so that each is measured on
its own, not queued behind the one before.

    python bench/drill_latency.py [--events 200] [--gap-ms 20]

Goal (issue 16): median under 100 ms. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.drill.bus import DrillBus  # noqa: E402
from runner.drill.model import (  # noqa: E402
    DrillPhase,
    DrillStatus,
    EventKind,
    NodeView,
    ProbeView,
)
from runner.drill.server import start_server  # noqa: E402
from runner.scenario import NodeStatus  # noqa: E402
from tests.support import browser  # noqa: E402


def status(i: int) -> DrillStatus:
    """A drill's status of a realistic size: five nodes, two probes, an alert."""
    nodes = tuple(
        NodeView(
            name=f"node{k}",
            status=NodeStatus.EXITED if (i + k) % 2 else NodeStatus.RUNNING,
            ready=(i + k) % 2 == 0,
            restarts=i,
            generation=i + 1,
        )
        for k in range(5)
    )
    probes = (
        ProbeView(name="inference", verdict="failed", observed="HTTP 503"),
        ProbeView(name="models", verdict="passed", observed="HTTP 200"),
    )
    return DrillStatus(
        scenario="head-only-restart",
        title="The head restarted alone",
        lab="local",
        phase=DrillPhase.HANDED_OVER,
        started_at=datetime.now(UTC),
        clock_s=float(i),
        nodes=nodes,
        probes=probes,
        alerts=("ServingDown",),
    )


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def measure(n: int, gap_s: float) -> list[float]:
    bus = DrillBus(status(0))
    server = start_server(bus)
    try:
        with browser.chromium() as driver:
            driver.get(server.url)
            deadline = time.monotonic() + 20
            while driver.execute_script("return document.getElementById('conn').textContent;") != (
                "live"
            ):
                if time.monotonic() > deadline:
                    raise SystemExit("the page did not connect within 20 s")
                time.sleep(0.05)
            for i in range(1, n + 1):
                bus.publish(EventKind.NODE, f"node{i % 5}: event {i}", status=status(i))
                time.sleep(gap_s)
            deadline = time.monotonic() + 30
            while driver.execute_script("return window.gamedayReceived.length;") < n:
                if time.monotonic() > deadline:
                    raise SystemExit("the page did not receive every event within 30 s")
                time.sleep(0.05)
            received = driver.execute_script("return window.gamedayReceived;")
    finally:
        server.stop()
        bus.close()
    return [float(at - ts) for at, _seq, ts in received]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    args = ap.parse_args()
    reason = browser.missing()
    if reason is not None:
        raise SystemExit(f"drill_latency: {reason}")
    lat = measure(args.events, args.gap_ms / 1000)
    print(f"# gameday drill page latency {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(
        f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
        f"Python {platform.python_version()}, chromium headless (Debian)"
    )
    print(
        f"bus event -> page (EventSource handler), {len(lat)} events {args.gap_ms:g} ms apart: "
        f"median {statistics.median(lat):.1f} ms, p95 {pct(lat, 95):.1f} ms, "
        f"max {max(lat):.1f} ms, min {min(lat):.1f} ms"
    )


if __name__ == "__main__":
    main()
