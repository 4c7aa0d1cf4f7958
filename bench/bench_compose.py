"""gameday benchmark, compose lab: prints figures, asserts nothing.

    python bench/bench_compose.py [--latency-samples N] [--skip-cold]

- image build: cold (no Docker layer cache; the base image present) and cached (inputs unchanged);
- lab up to healthy (every node ready, Prometheus scraping);
- each scenario's wall time, run one at a time on the up lab;
- detection latency: Docker's recorded exit time (State.FinishedAt) of a crash-looping engine vs
  the moment the runner's event wait returned with that exit (median, max).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.labs import wait_all_ready  # noqa: E402
from runner.labs.base import Change, ChangeKind, NodeConfig  # noqa: E402
from runner.labs.compose.build import build  # noqa: E402
from runner.labs.compose.driver import ComposeLab  # noqa: E402
from runner.run.suite import run_suite  # noqa: E402
from runner.spec.inventory_load import load_inventory  # noqa: E402
from runner.spec.scenario import discover, load_scenario  # noqa: E402


def quiet(_: str) -> None:
    pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency-samples", type=int, default=6)
    ap.add_argument("--skip-cold", action="store_true")
    args = ap.parse_args()
    inv = load_inventory(ROOT / "inventories" / "compose.yaml")
    assert inv.lab.compose is not None
    print(f"# gameday compose-lab benchmark {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(f"machine: {platform.machine()}, {platform.python_version()}, {platform.node()}")
    if not args.skip_cold:
        cold = build(inv.lab.compose, quiet, no_cache=True)
        print(f"image build, cold (no layer cache, base present): {cold.seconds:.1f} s")
    cached = build(inv.lab.compose, quiet)
    print(f"image build, cached (inputs unchanged): {cached.seconds:.2f} s")

    lab = ComposeLab(inv)
    lab.down()
    t0 = time.monotonic()
    lab.up()
    wait_all_ready(lab, 60)
    print(f"lab up to healthy (10 containers, Prometheus scraping): {time.monotonic() - t0:.1f} s")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for path in discover([ROOT / "scenarios"]):
                ls = load_scenario(path)
                sid = ls.scenario.metadata.id
                t = time.monotonic()
                out = run_suite([ls], inv, Path(tmp), quiet)
                wall = time.monotonic() - t
                print(f"  {sid:<26} {out.result.verdict.value:<7} {wall:5.1f} s wall")
        lat = detection_latency(lab, args.latency_samples)
        print(
            f"detection latency (Docker's exit time -> runner observed), {len(lat)} exits: "
            f"median {1000 * statistics.median(lat):.1f} ms, max {1000 * max(lat):.1f} ms"
        )
    finally:
        lab.down()


def detection_latency(lab: ComposeLab, samples: int) -> list[float]:
    node = "serving"
    base = lab.baseline_config(node)
    args = list(base.args)
    args[args.index("--max-model-len") + 1] = "131072"  # fails config validation at once
    bad = NodeConfig(args=tuple(args), env=base.env)
    change = Change(kind=ChangeKind.NODE_CONFIG, node=node, before=base, after=bad)
    seq = lab.last_event_seq()
    lab.apply(change)
    out: list[float] = []
    deadline = time.monotonic() + 120
    while len(out) < samples and time.monotonic() < deadline:
        for e in lab.wait_events(seq, 10):
            seq = e.seq
            if e.node == node and (failure := e.failure) is not None:
                seen = datetime.now(UTC)
                out.append((seen - failure.finished_at).total_seconds())
    lab.apply(change.towards(base, bad, "restore"))
    wait_all_ready(lab, 60)
    return out


if __name__ == "__main__":
    main()
