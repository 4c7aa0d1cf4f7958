"""`run --parallel`'s acceptance benchmark: the seven seed scenarios on the local lab serially and
at `--parallel 2`, `4` and `auto`, round after round in one run, each through the CLI as a user
runs it (`gameday run ... --json`); prints each one's wall time, its ratio to the round's serial
run, auto's pick and every verdict. The lab is healthy: a verdict other than passed (or skipped
where the serial runs skip the scenario: it does not apply) that is not `inconclusive` is flagged
WRONG, in a serial run as in a parallel one.

    python bench/parallel.py [--rounds 3] [--modes serial,2,4,auto] [--measure] [--fresh-reports]
                             [--write bench/PARALLEL.md --title TITLE]

The runs share one reports folder, as a user's or a CI's kept folder is, so a parallel run after
the first takes the longest scenarios first by their wall times in the earlier runs;
`--fresh-reports` gives each run an empty one (a checkout without history: the files' order).

With --measure, every serial run also measures what one instance of the lab takes while it runs
the scenarios, as bench/instance_cost.py does (CPU on average and in its busiest second, the
runner's included; memory at its parts' peaks), and prints it: `--parallel auto` reads the
figures committed in runner/run/capacity.py's COSTS, not these. Exit code 0 when no verdict was
WRONG, 1 otherwise.
`bench/under_load.py --busy 1 --script bench/parallel.py` runs it with a core kept busy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from instance_cost import Sampler, local_roots  # bench/, this script's folder
from seeds import SEVEN

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "inventories" / "local.yaml"
NODES = 5  # the local lab's


@dataclass
class Run:
    mode: str
    round: int
    wall: float
    exit: int
    verdicts: dict[str, str]
    why: dict[str, str]  # a scenario that did not pass: its first assertion that did not
    auto: str = ""  # auto's pick, as it printed it
    cost: dict[str, Any] | None = None


def gameday_run(mode: str, r: int, state: Path, measure: bool, history: Path | None) -> Run:
    """One run; `history`: the reports folder the benchmark's runs share (None: every run gets
    an empty one)."""
    args = [sys.executable, "-m", "runner.cli", "run", *SEVEN, "--lab", str(LAB), "--json"]
    if mode != "serial":
        args[4:4] = ["--parallel", mode]  # before the scenarios: `--parallel auto tp-...`
    with tempfile.TemporaryDirectory() as fresh:
        reports = str(history or fresh)
        env = os.environ | {"GAMEDAY_STATE_DIR": str(state), "GAMEDAY_REPORTS": reports}
        t0 = time.monotonic()
        proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        sampler = Sampler(lambda: local_roots(state), proc.pid) if measure else None
        th = threading.Thread(target=sampler.run, daemon=True) if sampler else None
        if th:
            th.start()
        out, err = proc.communicate(timeout=1800)
        wall = time.monotonic() - t0
        if sampler and th:
            sampler.stop.set()
            th.join()
    verdicts: dict[str, str] = {}
    why: dict[str, str] = {}
    try:
        result = json.loads(out)
    except json.JSONDecodeError:
        why["(run)"] = f"exit {proc.returncode}, no result.json: {err.strip()[-500:]}"
    else:
        for s in result["scenarios"]:
            verdicts[s["id"]] = s["verdict"]
            bad = [a for a in s["assertions"] if a["verdict"] != "passed"]
            if s["verdict"] != "passed":
                a = bad[0] if bad else None
                why[s["id"]] = (
                    f"{a['name']}: expected {a['expected']}, observed {a['observed']}"
                    if a
                    else "; ".join(s.get("notes", [])) or s.get("error") or ""
                )
    auto = next((ln for ln in err.splitlines() if ln.startswith("--parallel auto")), "")
    cost = sampler.figures(NODES) if sampler else None
    return Run(mode, r, wall, proc.returncode, verdicts, why, auto, cost)


def expected(runs: list[Run], sid: str) -> str:
    """What a scenario's verdict must be on the healthy lab: skipped where it does not apply
    (the serial runs skip it; without serial runs, every run skips it as not on this lab: a
    decision the runner makes from the scenario and the inventory before anything runs), else
    passed. A serial run's fail is as wrong as a parallel one's."""
    serial = [r.verdicts.get(sid) for r in runs if r.mode == "serial"]
    if serial:
        return "skipped" if all(v == "skipped" for v in serial) else "passed"
    ran = [r for r in runs if sid in r.verdicts]
    if ran and all(
        r.verdicts[sid] == "skipped" and r.why.get(sid, "").startswith("not on this lab")
        for r in ran
    ):
        return "skipped"
    return "passed"


def summary(runs: list[Run], modes: list[str]) -> tuple[list[str], int]:
    """The report's lines, and how many verdicts were WRONG: neither what the healthy lab must
    give (passed, or skipped where it does not apply) nor `inconclusive`."""
    lines = []
    wrong = 0
    serial = {r.round: r for r in runs if r.mode == "serial"}
    base = statistics.median(r.wall for r in serial.values()) if serial else None
    lines.append("| mode | round | wall s | vs serial | verdicts | auto picked |")
    lines.append("|---|---:|---:|---:|---|---|")
    for r in runs:
        ref = serial.get(r.round)
        notes = []
        for sid, v in sorted(r.verdicts.items()):
            want = expected(runs, sid)
            if v == want:
                continue
            flag = "" if v == "inconclusive" else "WRONG "
            wrong += flag != ""
            why = " ".join(r.why.get(sid, "").split())  # one table row
            notes.append(f"{flag}{sid} {v} ({why})")
        if "(run)" in r.why:
            notes.append(f"WRONG run: {r.why['(run)']}")
            wrong += 1
        passed = sum(v == "passed" for v in r.verdicts.values())
        skipped = sum(v == "skipped" for v in r.verdicts.values())
        text = f"passed {passed}, skipped {skipped}" + ("; " + "; ".join(notes) if notes else "")
        ratio = f"{ref.wall / r.wall:.2f}x" if ref else ""
        picked = r.auto.split(":", 2)[1].strip() if r.auto else ""
        lines.append(f"| {r.mode} | {r.round} | {r.wall:.1f} | {ratio} | {text} | {picked} |")
    lines.append("")
    for m in modes:
        walls = [r.wall for r in runs if r.mode == m]
        if walls and base:
            lines.append(
                f"- {m}: median {statistics.median(walls):.1f} s (min {min(walls):.1f}, max "
                f"{max(walls):.1f}), {base / statistics.median(walls):.2f}x serial's median"
            )
    autos = sorted({r.auto for r in runs if r.auto})
    for a in autos:
        lines.append(f"- auto said: `{a}`")
    lines.append(f"- verdicts flagged WRONG: {wrong}")
    return lines, wrong


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="serial,2,4,auto")
    ap.add_argument("--measure", action="store_true", help="measure one instance's cost")
    ap.add_argument("--write", type=Path, help="append the figures to this markdown file")
    ap.add_argument("--title", default="The seven scenarios, serial and in parallel")
    ap.add_argument(
        "--fresh-reports",
        action="store_true",
        help="every run gets an empty reports folder (a checkout without history: the "
        "scenarios are taken in the files' order), not the one the benchmark's runs share",
    )
    args = ap.parse_args()
    modes = args.modes.split(",")
    began = datetime.now(UTC)
    head = (
        f"{platform.machine()}, {len(os.sched_getaffinity(0))} usable cores, "
        f"{int(Path('/proc/meminfo').read_text().split()[1]) / 1024**2:.1f} GiB, "
        f"Python {platform.python_version()}"
    )
    print(f"# gameday parallel benchmark {began.isoformat(timespec='seconds')}\nmachine: {head}")
    runs: list[Run] = []
    measured: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as state, tempfile.TemporaryDirectory() as kept:
        # one reports folder for every run, as a user's or a CI's kept folder is: a parallel
        # run takes the longest scenarios first, by the earlier runs' wall times in it
        history = None if args.fresh_reports else Path(kept)
        for r in range(1, args.rounds + 1):
            for m in modes:  # rounds interleave the modes: the machine's noise falls on each
                run = gameday_run(m, r, Path(state), args.measure and m == "serial", history)
                runs.append(run)
                print(
                    f"round {r} {m:>6}: {run.wall:6.1f} s, exit {run.exit}, "
                    + ", ".join(f"{k} {v}" for k, v in sorted(run.verdicts.items()))
                    + (f"\n  {run.auto}" if run.auto else "")
                    + "".join(f"\n  {k}: {v}" for k, v in run.why.items()),
                    flush=True,
                )
                if run.cost is not None:
                    measured.append(run.cost)
                    print(f"  one instance: {json.dumps(run.cost)}", flush=True)
    lines, wrong = summary(runs, modes)
    print("\n".join(lines))
    if args.write:
        text = [f"\n## {args.title} ({began:%Y-%m-%d %H:%M} UTC, {head})\n"]
        text.append(
            f"`python bench/parallel.py --rounds {args.rounds} --modes {args.modes}"
            + (" --measure" if args.measure else "")
            + (" --fresh-reports" if args.fresh_reports else "")
            + "`; vs serial: the same round's serial wall time over this one; "
            + (
                "every run with an empty reports folder (the scenarios in the files' order).\n"
                if args.fresh_reports
                else "the runs share one reports folder (after the first run, a parallel run "
                "takes the longest scenarios first).\n"
            )
        )
        text += lines
        for i, c in enumerate(measured, 1):
            text.append(f"- one instance, serial run {i}: `{json.dumps(c)}`")
        with args.write.open("a", encoding="utf-8") as f:
            f.write("\n".join(text) + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
