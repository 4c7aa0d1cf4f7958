"""gameday benchmark, the three labs side by side: prints figures, asserts nothing.

    python bench/labs.py [--rounds N] [--labs local,compose,kubernetes]

In one run, each scenario that applies to each lab, serially, on the local lab
(inventories/local.yaml), the compose lab (inventories/compose.yaml; images built beforehand,
cached) and the Kubernetes lab on the stand-in API server (tests/kubeapi, started here on
127.0.0.1 with inventories/kube-testserver.yaml): per scenario and lab, the median wall time
of the scenario and its median times to fail, detect and recover in real-world seconds (what the
scenario asserts), so a lab that is slower, or that measures a window differently, shows.
A scenario a lab does not run is shown as `n/a`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.run.suite import run_suite  # noqa: E402
from runner.spec.inventory_load import load_inventory  # noqa: E402
from runner.spec.scenario import load_scenario  # noqa: E402

SCENARIOS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
INVENTORIES = {
    "local": ROOT / "inventories" / "local.yaml",
    "compose": ROOT / "inventories" / "compose.yaml",
    "kubernetes": ROOT / "inventories" / "kube-testserver.yaml",
}
FIGURES = ("wall", "time_to_fail_s", "time_to_detect_s", "time_to_recover_s")


def run_lab(name: str, rounds: int) -> tuple[dict[str, dict[str, list[float]]], float]:
    """Per scenario, each figure's values over the rounds; and the median wall of a whole run."""
    inv = load_inventory(INVENTORIES[name])
    scenarios = [load_scenario(ROOT / "scenarios" / f"{s}.yaml") for s in SCENARIOS]
    per: dict[str, dict[str, list[float]]] = {}
    walls = []
    with tempfile.TemporaryDirectory() as reports:
        for _ in range(rounds):
            t0 = time.monotonic()
            out = run_suite(scenarios, inv, Path(reports), lambda _m: None)
            walls.append(time.monotonic() - t0)
            for sc in out.result.scenarios:
                if sc.verdict.value == "skipped":
                    continue
                acc = per.setdefault(sc.id, {f: [] for f in (*FIGURES, "failed")})
                acc["wall"].append((sc.finished_at - sc.started_at).total_seconds())
                for f in FIGURES[1:]:
                    v = getattr(sc, f)
                    if v is not None:
                        acc[f].append(float(v))
                if sc.verdict.value != "passed":
                    acc["failed"].append(1.0)
    return per, statistics.median(walls)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--labs", default="local,compose,kubernetes")
    args = ap.parse_args()
    labs = args.labs.split(",")
    print(
        "# gameday benchmark: the labs side by side, "
        + datetime.now(UTC).isoformat(timespec="seconds")
    )
    print(
        f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores, "
        f"Python {platform.python_version()}; {args.rounds} round(s) per lab, serial"
    )
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    totals: dict[str, float] = {}
    for lab in labs:
        server: Any = None
        if lab == "kubernetes":
            from tests.kubeapi.server import Server

            server = Server(16443, ROOT / "build" / "kubeapi" / "kubeconfig", time_scale=100)
            server.start()
        try:
            results[lab], totals[lab] = run_lab(lab, args.rounds)
        finally:
            if server is not None:
                server.stop()
    width = 14
    head = f"{'scenario':<26}{'figure (s)':<18}" + "".join(f"{lab:>{width}}" for lab in labs)
    print(head)
    for sid in SCENARIOS:
        for f in FIGURES:
            row = []
            for lab in labs:
                acc = results[lab].get(sid)
                row.append("n/a" if acc is None else cell(acc[f]) + ("!" if acc["failed"] else ""))
            label = {
                "wall": "wall",
                "time_to_fail_s": "to fail",
                "time_to_detect_s": "to detect",
                "time_to_recover_s": "to recover",
            }[f]
            print(
                f"{sid if f == 'wall' else '':<26}{label:<18}"
                + "".join(f"{c:>{width}}" for c in row)
            )
    print(
        f"{'whole run (up, all, down)':<44}" + "".join(f"{totals[lab]:>{width}.1f}" for lab in labs)
    )
    print(
        "(`!`: a round of that scenario did not pass on that lab; "
        "`-`: the scenario has no such window)"
    )


if __name__ == "__main__":
    main()
