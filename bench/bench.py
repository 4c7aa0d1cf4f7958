"""gameday benchmark: prints figures, asserts nothing (these machines are noisy).

    python bench/bench.py [--rounds N] [--latency-samples N] [--labs local,compose]

Measures, in one run:
- per lab given (--labs local,compose): wall time of the seven scenarios, serial and with
  `--parallel 2` (isolated instances of the lab), and the ratio; each serial scenario's wall time
  split (bench/overhead.py) into what it inherently waits at the lab's time scale, engine process
  starts and stops, Prometheus configuration loads, and the runner's and lab control's own rest;
  each alert's time to fire;
- the local lab's bring-up: every node serving, then Prometheus scraping;
- detection latency: the engine's own clock at its exit vs the moment the runner's event wait
  returned with that exit (median, max); on the compose lab, Docker's recorded exit time
  (State.FinishedAt) vs the same moment;
- resident memory of one engine node (API server + engine-core process) and of the runner;
- the group size sweep: a tensor-parallel group of 2, 4, 8 and 16 nodes, its bring-up time and
  resident memory per node.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_compose import detection_latency as compose_latency  # noqa: E402
from engine_stamp import LAUNCHER, STAMP_VAR  # noqa: E402
from overhead import CATEGORIES, split  # noqa: E402
from seeds import SEVEN  # noqa: E402

from runner.labs import wait_all_ready  # noqa: E402
from runner.labs.base import Change, ChangeKind, NodeConfig  # noqa: E402
from runner.labs.compose.driver import ComposeLab  # noqa: E402
from runner.labs.local.driver import LocalLab  # noqa: E402
from runner.run.suite import run_suite  # noqa: E402
from runner.spec.inventory import Inventory  # noqa: E402
from runner.spec.inventory_load import load_inventory  # noqa: E402
from runner.spec.scenario import load_scenario  # noqa: E402

ALERT_OF = {
    "head-only-restart": "ServingDown",
    "stray-gpu-process": "ServingDown",
    "dhcp-address-change": "ExporterTargetDown",
}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def suite_wall(
    inv_path: Path, rounds: int, names: list[str], parallel: int = 1
) -> tuple[list[float], list[Any]]:
    inv = load_inventory(inv_path)
    scenarios = [load_scenario(ROOT / "scenarios" / f"{s}.yaml") for s in names]
    walls, results = [], []
    with tempfile.TemporaryDirectory() as reports:
        for _ in range(rounds):
            t0 = time.monotonic()
            out = run_suite(scenarios, inv, Path(reports), lambda _m: None, parallel=parallel)
            walls.append(time.monotonic() - t0)
            assert out.result.verdict.value == "passed", out.result.verdict
            results.append(out.result)
    return walls, results


def stamping(inv: Inventory) -> Inventory:
    """The lab with its engines started through bench/engine_stamp.py, which records the
    engine's own clock when it exits (for detection_latency)."""
    command = (sys.executable, str(LAUNCHER), "serve")
    return inv.model_copy(update={"lab": inv.lab.model_copy(update={"engine_command": command})})


def detection_latency(lab: LocalLab, samples: int, stamp: Path) -> list[float]:
    """Needs a lab made with `stamping`."""
    base = lab.baseline_config("serving")
    broken = NodeConfig(
        args=(*base.args, "--max-model-len", "131072"),
        env={**base.env, STAMP_VAR: str(stamp)},
    )
    lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=base, after=broken))
    seq = lab.last_event_seq()
    lat = []
    while len(lat) < samples:
        for e in lab.wait_events(seq, 30):
            seq = e.seq
            if e.node == "serving" and e.failure is not None:
                seen = time.time()
                engine_exit = float(stamp.read_text().split()[-2])
                lat.append((seen - engine_exit) * 1000)
    lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=broken, after=base))
    return lat


def group_inventory(size: int, base: Path) -> Path:
    """A local lab of one tensor-parallel group of `size` nodes (Llama-3.1-8B: 32 heads, so TP
    2..32 divides them), on 127.50.x.y, apart from the other labs."""
    common = ["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", str(size),
              "--nnodes", str(size), "--master-addr", "127.50.81.1", "--master-port", "29501",
              "--max-model-len", "4096"]  # fmt: skip
    hosts: dict[str, Any] = {}
    for rank in range(size):
        args = [*common, "--node-rank", str(rank)]
        args += ["--host", "{address}", "--port", "{port}"] if rank == 0 else ["--headless"]
        hosts[f"node{rank + 1}"] = {
            "ansible_connection": "local",
            "gameday_role": "head" if rank == 0 else "worker",
            "gameday_address": f"127.50.81.{rank + 1}",
            "gameday_port": 8000,
            "gameday_restart": "on-failure",
            "gameday_gpu": {"type": "a10g", "count": 1},
            "gameday_engine_args": args,
        }
    doc = {
        "all": {
            "vars": {
                "gameday_lab": {
                    "name": f"sweep-{size}",
                    "kind": "local",
                    "time_scale": 100,
                    "boot_timeout_s": 3600,
                }
            },
            "children": {"tp_group": {"hosts": hosts}},
        }
    }
    path = base / f"group-{size}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def group_sweep(sizes: list[int]) -> None:
    """Bring-up time and resident memory of a group of each size."""
    with tempfile.TemporaryDirectory() as d:
        for size in sizes:
            inv = load_inventory(group_inventory(size, Path(d)))
            lab = LocalLab(inv)
            t0 = time.monotonic()
            try:
                lab.up()
                states = wait_all_ready(lab, 3600 / inv.lab.time_scale + 60)
                up_s = time.monotonic() - t0
                rss = [
                    rss_kib(st.pid) + sum(rss_kib(c) for c in children(st.pid))
                    for st in states.values()
                    if st.pid is not None
                ]
                print(
                    f"  {size:>2} nodes: up and ready in {up_s:.1f} s; resident memory per node "
                    f"median {statistics.median(rss) / 1024:.1f} MiB, max {max(rss) / 1024:.1f} "
                    f"MiB, all nodes {sum(rss) / 1024:.0f} MiB"
                )
            except Exception as exc:  # a size that does not come up is a figure too
                print(f"  {size:>2} nodes: did not come up: {exc}")
            finally:
                lab.down()


def overhead_table(results: list[Any], scale: float, allowance: float) -> None:
    """Where the scenarios' wall time went (bench/overhead.py), summed over every run given."""
    scenarios = {sid: load_scenario(ROOT / "scenarios" / f"{sid}.yaml").scenario for sid in SEVEN}
    per: dict[str, dict[str, float]] = {}
    for r in results:
        for sc in r.scenarios:
            part = split(sc.model_dump(mode="json"), scenarios[sc.id], scale, allowance)
            acc = per.setdefault(sc.id, dict.fromkeys(CATEGORIES, 0.0))
            for k, v in part.items():
                acc[k] += v
    total = dict.fromkeys(CATEGORIES, 0.0)
    for acc in per.values():
        for k, v in acc.items():
            total[k] += v
    wall = sum(total.values())
    n = len(results)
    print(f"  where the scenarios' wall time went ({n} serial runs; seconds per run):")
    print("    " + f"{'scenario':<24}{'wall':>7}" + "".join(f"{c:>24}" for c in CATEGORIES))
    for sid, acc in sorted(per.items()):
        w = sum(acc.values())
        print(
            "    " + f"{sid:<24}{w / n:>7.2f}" + "".join(f"{acc[c] / n:>24.2f}" for c in CATEGORIES)
        )
    print(
        "    "
        + f"{'all seven':<24}{wall / n:>7.2f}"
        + "".join(f"{total[c] / n:>17.2f} ({100 * total[c] / wall:4.1f}%)" for c in CATEGORIES)
    )


def suite_figures(label: str, inv_path: Path, rounds: int) -> list[Any]:
    """The seven, serial and on --parallel 2 isolated instances, side by side in this run."""
    serial, results = suite_wall(inv_path, rounds, SEVEN)
    par, par_results = suite_wall(inv_path, rounds, SEVEN, parallel=2)
    verdicts = {(s.id, s.verdict.value) for r in results for s in r.scenarios}
    same = verdicts == {(s.id, s.verdict.value) for r in par_results for s in r.scenarios}
    print(
        f"{label}: seven scenarios, {rounds} rounds: serial median {statistics.median(serial):.1f}"
        f" s (min {min(serial):.1f}, max {max(serial):.1f}), --parallel 2 median "
        f"{statistics.median(par):.1f} s (min {min(par):.1f}, max {max(par):.1f}), ratio "
        f"{statistics.median(serial) / statistics.median(par):.2f}x "
        f"(verdicts the same as serial: {'yes' if same else 'NO'})"
    )
    ups = [
        (r.finished_at - r.started_at).total_seconds()
        - sum((s.finished_at - s.started_at).total_seconds() for s in r.scenarios)
        for r in results
    ]
    print(
        f"  of a serial run, outside the scenarios (lab bring-up until every node serves, "
        f"and down): median {statistics.median(ups):.1f} s"
    )
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-samples", type=int, default=10)
    ap.add_argument(
        "--labs",
        default="local",
        help="comma-separated: local, compose (compose: images built beforehand, cached)",
    )
    args = ap.parse_args()
    labs = args.labs.split(",")
    inv_path = ROOT / "inventories" / "local.yaml"
    inv = load_inventory(inv_path)

    print(f"# gameday benchmark {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"{len(__import__('os').sched_getaffinity(0))} cores, Python {platform.python_version()}"
    )
    for lab_name in labs:
        path = ROOT / "inventories" / f"{lab_name}.yaml"
        spec = load_inventory(path).lab
        results = suite_figures(f"{lab_name} lab", path, args.rounds)
        overhead_table(results, spec.time_scale, spec.timing_allowance_s)
        mon = spec.monitoring
        assert mon is not None
        for sid, alert in ALERT_OF.items():
            rule = next(r for r in mon.rules if r.name == alert)
            ttd = [s.time_to_detect_s for r in results for s in r.scenarios if s.id == sid]
            print(
                f"  {sid}: {alert} fired {statistics.median(ttd):.1f} s real after the fault "
                f"(median of {len(ttd)}; the rule's for: {rule.for_s:g} s, so "
                f"{statistics.median(ttd) - rule.for_s:+.1f} s of scrape, evaluation and failure)"
            )

    if "compose" in labs:
        clab = ComposeLab(load_inventory(ROOT / "inventories" / "compose.yaml"))
        clab.up()
        try:
            wait_all_ready(clab, 120)
            lat_c = compose_latency(clab, args.latency_samples)
        finally:
            clab.down()
        print(
            f"compose lab detection latency (Docker's recorded exit time -> runner has the "
            f"event), {len(lat_c)} exits: median {1000 * statistics.median(lat_c):.1f} ms, "
            f"max {1000 * max(lat_c):.1f} ms"
        )

    lab = LocalLab(stamping(inv))
    t0 = time.monotonic()
    lab.up()
    try:
        st = wait_all_ready(lab, 60)["serving"]
        serving = time.monotonic() - t0
        lab.monitoring_ready(60)
        print(
            f"local lab bring-up (5 engine nodes, 4 exporters, Prometheus): every node serving "
            f"after {serving:.1f} s, Prometheus scraping every target after "
            f"{time.monotonic() - t0:.1f} s"
        )
        assert st.pid is not None
        api = rss_kib(st.pid)
        core = sum(rss_kib(c) for c in children(st.pid))
        print(
            f"engine node resident memory: {(api + core) / 1024:.1f} MiB "
            f"(API server {api / 1024:.1f} MiB + engine core {core / 1024:.1f} MiB)"
        )
        with tempfile.TemporaryDirectory() as d:
            lat = detection_latency(lab, args.latency_samples, Path(d) / "exit")
        print(
            f"detection latency (engine exit -> runner has the event), {len(lat)} samples: "
            f"median {statistics.median(lat):.1f} ms, max {max(lat):.1f} ms"
        )
    finally:
        lab.down()
    print("group size sweep (one tensor-parallel group, Llama-3.1-8B, x100):")
    group_sweep([2, 4, 8, 16])
    runner_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"runner resident memory (peak of this process): {runner_rss:.1f} MiB")


if __name__ == "__main__":
    main()
