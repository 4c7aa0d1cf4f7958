"""The latency from a drill's bus event to its live page, in a real headless Chromium.

A DrillBus and the page server run in this process; the page is opened in Debian's chromium
(through its chromedriver, as tests/e2e/test_drill_page.py does). Each of N events carries its
publication time (`ts`); the page's script records Date.now() when the event arrives, and the
two are compared (one machine, one clock). Events are spaced apart so that each is measured on
its own, not queued behind the one before.

    python bench/drill_latency.py [--events 200] [--gap-ms 20]
    python bench/drill_latency.py --lab inventories/local.yaml [--seconds 30]

With --lab, from the lab itself: a real drill (tp-mismatch, in this process) on that lab, its
page in Chromium, and the serving node restarted every 2 s; each node event's latency is from
the lab's own stamp of the event (the supervisor's, Docker's, the API server's) to the page's
receipt, and split at the bus (lab -> drill bus, drill bus -> page).

Goal: median under 100 ms. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.drill.bus import DrillBus, Request  # noqa: E402
from runner.drill.launch import run_drill  # noqa: E402
from runner.drill.model import (  # noqa: E402
    DrillPhase,
    DrillStatus,
    EventKind,
    NodeView,
    ProbeView,
)
from runner.drill.server import start_server  # noqa: E402
from runner.drill.session import Drill, DrillOptions  # noqa: E402
from runner.labs import open_lab  # noqa: E402
from runner.spec.inventory_load import load_inventory  # noqa: E402
from runner.spec.kinds import NodeStatus  # noqa: E402
from runner.spec.scenario import load_scenario  # noqa: E402
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


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"drill_latency: {what} within {timeout:g} s")
        time.sleep(0.05)


def measure_lab(inventory_path: Path, seconds: float) -> tuple[list[float], list[float]]:
    """(lab event -> page, lab event -> bus) in ms, for every node event of a real drill."""
    inventory = load_inventory(inventory_path)
    ls = load_scenario(ROOT / "scenarios" / "tp-mismatch.yaml")
    held: dict[str, Any] = {}
    ready = threading.Event()

    def on_start(d: Drill) -> None:
        held["drill"], held["server"] = d, start_server(d.bus)
        ready.set()

    with tempfile.TemporaryDirectory() as reports:
        options = DrillOptions(timeout_s=seconds + 300)
        t = threading.Thread(
            target=run_drill,
            args=(ls, inventory, Path(reports), lambda _m: None),
            kwargs={"options": options, "on_start": on_start},
            daemon=True,
        )
        t.start()
        ready.wait(600)
        d, server = held["drill"], held["server"]
        try:
            with browser.chromium() as driver:
                driver.get(server.url)
                wait_until(
                    lambda: d.bus.status.phase is DrillPhase.HANDED_OVER, 600, "no hand-over"
                )
                lab = open_lab(inventory)
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline:
                    lab.restart(["serving"])
                    time.sleep(2)
                time.sleep(1)
                received = driver.execute_script("return window.gamedayReceived;")
        finally:
            d.bus.request(Request.GIVE_UP, {"source": "bench"})
            t.join(600)
            server.stop()
    lab_ts = {
        e.seq: datetime.fromisoformat(e.data["lab_ts"]).timestamp() * 1000
        for e in d.bus.events()
        if e.kind is EventKind.NODE and "lab_ts" in e.data
    }
    to_page = [float(at - lab_ts[seq]) for at, seq, _ts in received if seq in lab_ts]
    to_bus = [float(ts - lab_ts[seq]) for _at, seq, ts in received if seq in lab_ts]
    return to_page, to_bus


def figures(lat: list[float]) -> str:
    return (
        f"median {statistics.median(lat):.1f} ms, p95 {pct(lat, 95):.1f} ms, "
        f"max {max(lat):.1f} ms, min {min(lat):.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--lab", type=Path, default=None, help="Measure from this lab's events.")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    reason = browser.missing()
    if reason is not None:
        raise SystemExit(f"drill_latency: {reason}")
    print(f"# gameday drill page latency {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(
        f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
        f"Python {platform.python_version()}, chromium headless (Debian)"
    )
    if args.lab is not None:
        to_page, to_bus = measure_lab(args.lab, args.seconds)
        if not to_page:
            raise SystemExit("drill_latency: no node event reached the page")
        print(f"lab event -> page, {len(to_page)} node events: {figures(to_page)}")
        print(f"  of which lab event -> drill bus: {figures(to_bus)}")
        return
    lat = measure(args.events, args.gap_ms / 1000)
    print(
        f"bus event -> page (EventSource handler), {len(lat)} events {args.gap_ms:g} ms apart: "
        f"median {statistics.median(lat):.1f} ms, p95 {pct(lat, 95):.1f} ms, "
        f"max {max(lat):.1f} ms, min {min(lat):.1f} ms"
    )


if __name__ == "__main__":
    main()
