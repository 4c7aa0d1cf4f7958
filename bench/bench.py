"""gameday benchmark: prints figures, asserts nothing (these machines are noisy).

    python bench/bench.py [--rounds N] [--latency-samples N]

Measures, in one run:
- wall time of the seven scenarios on the local lab, serial and with `--parallel 2` (two isolated
  instances of the lab), and the ratio;
- wall time of the four start-up scenarios together on the local lab (N rounds; median, min);
- how much of that wall time the scenarios inherently wait (the engine's scaled phases);
- detection latency: the engine's own clock at its exit vs the moment the runner's event wait
  returned with that exit (median, max);
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

from runner.inventory import load_inventory  # noqa: E402
from runner.labs import wait_all_ready  # noqa: E402
from runner.labs.base import Change, ChangeKind, EventType, NodeConfig  # noqa: E402
from runner.labs.local.driver import LocalLab  # noqa: E402
from runner.scenario import load_scenario  # noqa: E402
from runner.suite import run_suite  # noqa: E402

FOUR = ["context-window-overflow", "kv-cache-shortage", "tp-mismatch", "service-name-collision"]
THREE = ["head-only-restart", "stray-gpu-process", "dhcp-address-change"]
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


def detection_latency(lab: LocalLab, samples: int, stamp: Path) -> list[float]:
    base = lab.baseline_config("serving")
    broken = NodeConfig(
        args=(*base.args, "--max-model-len", "131072"),
        env={**base.env, "GAMEDAY_EXIT_STAMP": str(stamp)},
    )
    lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=base, after=broken))
    seq = lab.last_event_seq()
    lat = []
    while len(lat) < samples:
        for e in lab.wait_events(seq, 30):
            seq = e.seq
            if e.node == "serving" and e.type is EventType.EXITED and not e.data.get("stopped"):
                seen = time.time()
                engine_exit = float(stamp.read_text().split()[-2])
                lat.append((seen - engine_exit) * 1000)
    lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=broken, after=base))
    return lat


def process_starts(sc: Any) -> float:
    """Seconds the scenario's engine processes took from spawn to their first output."""
    started: dict[str, datetime] = {}
    total = 0.0
    for e in sc.timeline:
        if not e.source.startswith("lab:"):
            continue
        if e.event.startswith("started incarnation"):
            started[e.source] = e.ts
        elif e.event == "first_output" and e.source in started:
            total += (e.ts - started.pop(e.source)).total_seconds()
    return total


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-samples", type=int, default=10)
    args = ap.parse_args()
    inv_path = ROOT / "inventories" / "local.yaml"
    inv = load_inventory(inv_path)
    scale = inv.lab.time_scale

    print(f"# gameday benchmark {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"{len(__import__('os').sched_getaffinity(0))} cores, Python {platform.python_version()}"
    )

    # the seven, serial and on --parallel 2 isolated instances, side by side in this run
    seven = sorted([*FOUR, *THREE])
    serial, _ = suite_wall(inv_path, args.rounds, seven)
    par, par_results = suite_wall(inv_path, args.rounds, seven, parallel=2)
    same = all(s.verdict.value == "passed" for r in par_results for s in r.scenarios)
    print(
        f"seven scenarios, {args.rounds} rounds: serial median {statistics.median(serial):.1f} s, "
        f"--parallel 2 median {statistics.median(par):.1f} s, ratio "
        f"{statistics.median(serial) / statistics.median(par):.2f}x "
        f"(verdicts the same as serial: {'yes' if same else 'NO'})"
    )

    walls, results4 = suite_wall(inv_path, args.rounds, FOUR)
    # what the scenarios inherently wait: per scenario, baseline probes, the failing start(s)
    # and the recovery boot, all at the lab's time scale (engine phase durations in real seconds)
    boot_real = 9 + 9 + 70.34 + 71.20 + 26 + 14 + 9 + 2  # config..API start, Qwen-14B on A10G
    inherent = {
        "context-window-overflow": 9 + (9 + 9 + 70.34 + 71.20 + 26 + 14) + boot_real,
        "kv-cache-shortage": 2 * (9 + 9 + 70.34 + 71.20 + 26 + 14) + 10 + boot_real,
        "tp-mismatch": 9 + 400 + boot_real,  # 400 s: the --nnodes shortcut's settle window
        "service-name-collision": 2 * (9 + 9) + 10 + boot_real,
    }
    inherent_lab = sum(inherent.values()) / scale
    print(
        f"four start-up scenarios, {args.rounds} rounds: median {statistics.median(walls):.1f} s,"
        f" min {min(walls):.1f} s, max {max(walls):.1f} s wall "
        f"(lab brought up and down by each run)"
    )
    print(
        f"  of which the scenarios inherently wait (scaled phases): {inherent_lab:.1f} s; "
        f"runner and lab overhead {statistics.median(walls) - inherent_lab:.1f} s "
        f"({100 * (statistics.median(walls) - inherent_lab) / statistics.median(walls):.0f} %)"
    )
    # per scenario, bring-up and tear-down left out: scenario wall time = scaled phases + the
    # engine processes' own start (interpreter and imports, unscaled: spawn -> first output,
    # from the lab's events) + what is left, the runner's (and the lab's control) overhead
    over = []
    for r in results4:
        for sc in r.scenarios:
            wall = (sc.finished_at - sc.started_at).total_seconds()
            starts = process_starts(sc)
            over.append((sc.id, wall, inherent[sc.id] / scale, starts))
    tot_wall = sum(w for _, w, _, _ in over)
    tot_inh = sum(i for _, _, i, _ in over)
    tot_starts = sum(st for _, _, _, st in over)
    rest = tot_wall - tot_inh - tot_starts
    print(
        f"  per scenario (bring-up left out), {len(over)} scenario runs: wall {tot_wall:.1f} s = "
        f"scaled phases {tot_inh:.1f} s + engine process starts {tot_starts:.1f} s + runner and "
        f"lab control {rest:.1f} s ({100 * rest / tot_wall:.1f} % of scenario wall time)"
    )

    walls3, results3 = suite_wall(inv_path, args.rounds, THREE)
    print(
        f"three runtime scenarios (4-node group, Prometheus), {args.rounds} rounds: median "
        f"{statistics.median(walls3):.1f} s, min {min(walls3):.1f} s, max {max(walls3):.1f} s"
    )
    mon = inv.lab.monitoring
    assert mon is not None
    for sid, alert in ALERT_OF.items():
        rule = next(r for r in mon.rules if r.name == alert)
        ttd = [s.time_to_detect_s for r in results3 for s in r.scenarios if s.id == sid]
        print(
            f"  {sid}: {alert} fired {statistics.median(ttd):.1f} s real after the injection "
            f"(median of {len(ttd)}; the rule's for: {rule.for_s:g} s, so "
            f"{statistics.median(ttd) - rule.for_s:+.1f} s of scrape, evaluation and failure)"
        )

    lab = LocalLab(inv)
    lab.up()
    try:
        st = wait_all_ready(lab, 60)["serving"]
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
