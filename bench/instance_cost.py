"""What one instance of a lab takes on this machine while it runs the scenarios of scenarios/
(the seed scenarios and the catalogue's) serially, through the CLI as a user runs them: the
figures `--parallel auto` reads (the lab kind's COST in runner/labs/<kind>/kind.py),
printed as the lines to put there.

    python bench/instance_cost.py [--lab inventories/local.yaml] [--write bench/RESULTS.md]

Every 0.2 s it reads from /proc the instance's processes (the local lab: its supervisor and every
process under it; the compose lab: each of its containers' processes, found through Docker) and
the runner's own process:

- CPU: each process's utime + stime, summed over the samples as each one's growth (a process that
  ends or restarts between two samples loses at most its last 0.2 s); `cpu_mean` is the instance's
  and the runner's CPU seconds over the wall seconds from the first scenario's start to the lab's
  going down (its bring-up left out: see `scenarios_span`), `cpu_peak` their busiest second in
  that span;
- memory: the resident memory of each part at its peak (supervisor, Prometheus, Alertmanager,
  node-exporters, engines), split into what each instance has once (`fixed_mib`) and what scales
  with its nodes (`per_node_mib`: engines and exporters over the nodes).

Each must pass, or be skipped where it does not apply (a failed run measures a lab that did
something else): exit 1 otherwise. The machine's load average before and after is printed with
the figures: a loaded machine stretches the run, which lowers the mean a little (the CPU seconds
are the instance's, the wall seconds the machine's).
A compose lab's image must be built first (`gameday lab build --lab inventories/compose.yaml`).
Run it under the lab lock, on a machine as quiet as can be had.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.spec.inventory_load import load_inventory  # noqa: E402
from runner.spec.kinds import LabKind  # noqa: E402

SCENARIOS = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
TICK = os.sysconf("SC_CLK_TCK")
PARTS = ("supervisor", "prometheus", "alertmanager", "exporters", "engines")
PER_NODE = ("engines", "exporters")


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def own_ticks(pid: int) -> int:
    """utime + stime of one process (its children are counted as themselves)."""
    f = _stat(pid)
    return int(f[11]) + int(f[12])


def start_time(pid: int) -> int:
    """Distinguishes a pid reused by a new process from the old one."""
    return int(_stat(pid)[19])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo.extend(int(c) for c in (task / "children").read_text().split())
    return out


def part(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    text = b" ".join(argv).decode(errors="replace")
    prog = os.path.basename(argv[0].decode(errors="replace"))
    if "runner.labs.local.supervisor" in text:
        return "supervisor"
    if "alertmanager" in prog:
        return "alertmanager"
    if "exporter" in prog:
        return "exporters"
    if prog == "prometheus":
        return "prometheus"
    return "engines"  # vllm-lab serve, its engine core, a scenario's stray process


def local_roots(state: Path) -> list[int]:
    """The local lab's supervisor (one instance: one pidfile)."""
    return [int(p.read_text()) for p in state.glob("*/supervisor.pid")][:1]


def compose_roots(project: str) -> list[int]:
    """The first process of each running container of the Compose project."""
    ids = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={project}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if not ids:
        return []
    pids = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Pid}}", *ids],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    return [int(p) for p in pids if p.isdigit() and p != "0"]


@dataclass
class Sampler:
    """One lab instance's processes and the runner's, read every `period` s."""

    roots: Any  # () -> list[int]: the instance's root processes now
    runner_pid: int
    period: float = 0.2
    roots_every: float = 1.0  # Docker is asked for the containers at most this often
    peak_kib: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    last: dict[tuple[int, int], int] = field(default_factory=dict)  # (pid, start) -> ticks
    total_ticks: int = 0
    series: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, total ticks)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        roots: list[int] = []
        asked = 0.0
        while not self.stop.wait(self.period):
            now = time.monotonic()
            if now - asked >= self.roots_every or not roots:
                with contextlib.suppress(OSError, ValueError):
                    roots = self.roots()
                asked = now
            pids = [self.runner_pid]
            for r in roots:
                with contextlib.suppress(OSError):
                    pids += tree(r)
            by_part = dict.fromkeys(PARTS, 0)
            for pid in pids:
                try:
                    key = (pid, start_time(pid))
                    ticks = own_ticks(pid)
                    if pid != self.runner_pid:
                        by_part[part(pid)] += rss_kib(pid)
                except (OSError, IndexError, ValueError):
                    continue
                # a process first seen now: its ticks before it was seen count only when it
                # started after the sampling did (the runner's own start-up is its cost too)
                self.total_ticks += ticks - self.last.get(key, 0 if self.series else ticks)
                self.last[key] = ticks
            for k, v in by_part.items():
                self.peak_kib[k] = max(self.peak_kib[k], v)
            self.series.append((now, self.total_ticks))

    def figures(self, nodes: int, span: tuple[float, float] | None = None) -> dict[str, Any]:
        """CPU over `span` (monotonic from, to) if given, else over every sample; memory at its
        peaks over every sample."""
        s = self.series
        if span is not None:
            s = [x for x in s if span[0] <= x[0] <= span[1]] or s
        span = s[-1][0] - s[0][0] if len(s) > 1 else 0.0
        cpu_s = (s[-1][1] - s[0][1]) / TICK if len(s) > 1 else 0.0
        peak = 0.0
        j = 0
        for t, c in s:  # the busiest second: the window of at least 1 s ending at each sample
            while j + 1 < len(s) and t - s[j + 1][0] >= 1.0:
                j += 1
            if t - s[j][0] >= 1.0:
                peak = max(peak, (c - s[j][1]) / TICK / (t - s[j][0]))
        mib = {k: round(v / 1024, 1) for k, v in self.peak_kib.items()}
        return {
            "cpu_mean": round(cpu_s / span, 2) if span else 0.0,
            "cpu_peak": round(peak, 2),
            "fixed_mib": round(sum(v for k, v in mib.items() if k not in PER_NODE), 1),
            "per_node_mib": round(sum(mib[k] for k in PER_NODE) / nodes, 1),
            "peak_rss_mib": mib,
            "sampled_s": round(span, 1),
        }


def measure(lab: Path) -> tuple[dict[str, Any], dict[str, str], float]:
    """One serial run of the scenarios on `lab`: its figures, each verdict, its wall time."""
    inventory = load_inventory(lab)
    args = [sys.executable, "-m", "runner.cli", "run", *SCENARIOS, "--lab", str(lab), "--json"]
    with tempfile.TemporaryDirectory() as state, tempfile.TemporaryDirectory() as reports:
        env = os.environ | {"GAMEDAY_STATE_DIR": state, "GAMEDAY_REPORTS": reports}
        t0 = time.monotonic()
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        if inventory.lab.kind is LabKind.COMPOSE:
            assert inventory.lab.compose is not None
            project = inventory.lab.compose.project
            sampler = Sampler(lambda: compose_roots(project), proc.pid)
        else:
            sampler = Sampler(lambda: local_roots(Path(state)), proc.pid)
        th = threading.Thread(target=sampler.run, daemon=True)
        th.start()
        said: list[tuple[float, str]] = []  # the run's progress lines, as they came
        reader = threading.Thread(target=_progress, args=(proc, said), daemon=True)
        reader.start()
        assert proc.stdout is not None
        # a run that hangs is killed after 30 minutes, as `communicate(timeout=1800)` would
        killer = threading.Timer(1800, proc.kill)
        killer.start()
        try:
            out = proc.stdout.read()
            proc.wait()
        finally:
            killer.cancel()
        reader.join()
        wall = time.monotonic() - t0
        sampler.stop.set()
        th.join()
        err = "".join(line for _, line in said)
    try:
        verdicts = {s["id"]: s["verdict"] for s in json.loads(out)["scenarios"]}
    except (json.JSONDecodeError, KeyError):
        verdicts = {"(run)": f"exit {proc.returncode}: {err.strip()[-300:]}"}
    return sampler.figures(len(inventory.nodes), scenarios_span(said)), verdicts, wall


def _progress(proc: subprocess.Popen[str], said: list[tuple[float, str]]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        said.append((time.monotonic(), line))


def scenarios_span(said: list[tuple[float, str]]) -> tuple[float, float] | None:
    """From the first scenario's start to the lab's going down, by the run's progress lines:
    the CPU figures leave out the lab's bring-up. Every instance of a parallel run comes up at
    once, a busy moment they share that the rule's room for one instance's peak cannot cover
    however it is measured; that room is for the scenarios' steps, which do not line up. A
    window missed in the bring-ups' contention is inconclusive (runner/run/load.py)."""
    starts = [t for t, line in said if "] starting" in line]
    downs = [t for t, line in said if "taking lab" in line]
    return (starts[0], downs[-1]) if starts and downs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lab", type=Path, default=ROOT / "inventories" / "local.yaml")
    ap.add_argument("--write", type=Path, help="append the figures to this markdown file")
    args = ap.parse_args()
    lab = args.lab.resolve()
    rel = lab.relative_to(ROOT)
    kind = load_inventory(lab).lab.kind.value
    began = datetime.now(UTC)
    cores = len(os.sched_getaffinity(0))
    head = f"{platform.machine()}, {cores} usable cores, Python {platform.python_version()}"
    print(f"# one instance of {rel} ({began:%Y-%m-%d %H:%M} UTC, {head})", flush=True)
    load = os.getloadavg()
    figures, verdicts, wall = measure(lab)
    load_after = os.getloadavg()
    head += f", load average {load[0]:.1f} before, {load_after[0]:.1f} after"
    bad = {k: v for k, v in verdicts.items() if v not in ("passed", "skipped")}
    said = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items()))
    print(f"{head}\nwall {wall:.1f} s; {said}")
    print(json.dumps(figures))
    const = (
        "COST = InstanceCost(\n"
        f'    measured="{began:%Y-%m-%d} on {cores} cores",\n'
        f'    by="bench/instance_cost.py --lab {rel}",\n'
        f"    cpu_mean={figures['cpu_mean']},\n"
        f"    cpu_peak={figures['cpu_peak']},\n"
        f"    fixed_mib={figures['fixed_mib']},\n"
        f"    per_node_mib={figures['per_node_mib']},\n"
        ")"
    )
    print(f"runner/labs/{kind}/kind.py's COST:\n" + const)
    if bad:
        print(f"not every scenario passed: {bad}; the figures are not a healthy run's")
    if args.write:
        with args.write.open("a", encoding="utf-8") as f:
            f.write(
                f"\n`python bench/instance_cost.py --lab {rel}` ({began:%Y-%m-%d %H:%M} UTC, "
                f"{head}): wall {wall:.1f} s, {len(verdicts) - len(bad)} of {len(verdicts)} "
                f"passed or skipped; `{json.dumps(figures)}`\n"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
