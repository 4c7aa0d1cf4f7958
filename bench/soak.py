"""gameday soak: the safety figures issue 6 asks for. Prints, asserts nothing.

    python bench/soak.py [--kills 50] [--labs local,compose] [--runs 20] [--fuzz 5000] [--seed 1]

- kills: on each lab, a scenario run SIGKILLed at a random moment, then `gameday cleanup`;
  counts the leftovers found afterwards (engine configs, stray processes, moved addresses,
  scrape config, nodes not serving, open journal entries; on the compose lab also containers,
  networks and volumes beyond the lab's own). Goal 0. The compose lab needs Docker and builds its
  image when it is missing (cached).
- fuzz: mutated scenario and inventory files thrown at the loaders; counts tracebacks (any
  exception that is not gameday's InputError). Goal 0.
- runs: every scenario run N times on the local lab; counts verdict changes. Goal 0.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner import journal  # noqa: E402
from runner.errors import InputError  # noqa: E402
from runner.inventory import load_inventory  # noqa: E402
from runner.labs import LabDriver, open_lab  # noqa: E402
from runner.scenario import LabKind, load_scenario  # noqa: E402
from runner.suite import run_suite  # noqa: E402
from runner.undo import cleanup_lab  # noqa: E402

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
INVENTORY = ROOT / "inventories" / "local.yaml"
LAB_INVENTORIES = {"local": INVENTORY, "compose": ROOT / "inventories" / "compose.yaml"}
# a scenario on the compose lab takes 8-35 s of wall time, on the local lab 3-20 s
KILL_WINDOW_S = {"local": 10.0, "compose": 25.0}


def kills(n: int, rnd: random.Random, lab: LabDriver, name: str) -> tuple[int, list[str]]:
    inv_path = LAB_INVENTORIES[name]
    applicable = [s for s in SCENARIOS if lab.kind in load_scenario(s).scenario.labs]
    leftovers: list[str] = []
    with tempfile.TemporaryDirectory() as reports:
        for i in range(n):
            scenario = rnd.choice(applicable)
            delay = rnd.uniform(0.2, KILL_WINDOW_S[name])
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "runner.cli",
                    "run",
                    str(scenario),
                    "--lab",
                    str(inv_path),
                    "--reports",
                    reports,
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            cleanup_lab(lab)
            found = lab.leftovers() + [  # type: ignore[attr-defined]
                f"open journal {c.seq}" for c in journal.open_changes(lab.state_dir)
            ]
            leftovers += [f"kill {i} ({scenario.stem} at {delay:.1f} s): {p}" for p in found]
    return n, leftovers


def mutate(data: object, rnd: random.Random) -> object:
    values = [
        None,
        0,
        -1,
        1e308,
        "",
        "x" * 10_000,
        [],
        {},
        [[[]]],
        True,
        "{{",
        "(a+)+",
        {"kind": "nope"},
        ["--max-model-len"],
        "$(reboot)",
    ]
    if isinstance(data, dict) and data and rnd.random() < 0.8:
        k = rnd.choice(list(data))
        if rnd.random() < 0.2:
            data.pop(k)
        else:
            data[k] = mutate(data[k], rnd)
        return data
    if isinstance(data, list) and data and rnd.random() < 0.8:
        i = rnd.randrange(len(data))
        data[i] = mutate(data[i], rnd)
        return data
    return rnd.choice(values)


def fuzz(n: int, rnd: random.Random) -> tuple[int, list[str]]:
    tracebacks: list[str] = []
    files = [*((s, False) for s in SCENARIOS), (INVENTORY, True)]
    with tempfile.TemporaryDirectory() as d:
        for i in range(n):
            src, inventory = rnd.choice(files)
            text = src.read_text()
            if rnd.random() < 0.3:
                text = text[: rnd.randrange(len(text))]
            else:
                text = yaml.safe_dump(mutate(yaml.safe_load(text), rnd))
            p = Path(d) / f"{i}.yaml"
            p.write_text(text)
            try:
                (load_inventory if inventory else load_scenario)(p)
            except InputError:
                pass
            except Exception as exc:  # counting them is the point
                tracebacks.append(f"{src.name}: {type(exc).__name__}: {exc}")
    return n, tracebacks


def runs(n: int) -> tuple[int, dict[str, Counter[str]]]:
    inv = load_inventory(INVENTORY)
    loaded = [load_scenario(s) for s in SCENARIOS]
    verdicts: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory() as reports:
        for _ in range(n):
            out = run_suite(loaded, inv, Path(reports), lambda _m: None)
            for s in out.result.scenarios:
                verdicts.setdefault(s.id, Counter())[s.verdict.value] += 1
    return n * len(loaded), verdicts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=50, help="per lab")
    ap.add_argument("--labs", default="local,compose", help="labs to kill on: local, compose")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--fuzz", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    os.environ.setdefault("GAMEDAY_STATE_DIR", tempfile.mkdtemp(prefix="gameday-soak-"))

    n_fuzz, tracebacks = fuzz(args.fuzz, rnd)
    print(f"fuzzed inputs: {n_fuzz}, tracebacks: {len(tracebacks)}")
    for t in tracebacks[:10]:
        print(f"  {t}")

    for name in filter(None, args.labs.split(",")):
        inventory = load_inventory(LAB_INVENTORIES[name])
        if inventory.lab.kind is LabKind.COMPOSE and inventory.lab.compose is not None:
            from runner.labs.compose.build import build

            build(inventory.lab.compose, lambda _m: None)
        lab = open_lab(inventory)
        lab.up()
        started = time.monotonic()
        try:
            n_kills, leftovers = kills(args.kills, rnd, lab, name)
            if inventory.lab.kind is LabKind.COMPOSE:
                lab.down()
                leftovers += [f"after lab down: {o}" for o in lab.leftover_objects()]  # type: ignore[attr-defined]
        finally:
            lab.down()
        print(
            f"kills tried: {n_kills} ({name} lab, {time.monotonic() - started:.0f} s), "
            f"leftovers after cleanup: {len(leftovers)}"
        )
        for item in leftovers[:10]:
            print(f"  {item}")

    n_runs, verdicts = runs(args.runs)
    changes = sum(len(c) - 1 for c in verdicts.values())
    print(
        f"repeated runs: {n_runs} ({args.runs} x {len(SCENARIOS)} scenarios), "
        f"verdict changes: {changes}"
    )
    for sid, c in sorted(verdicts.items()):
        print(f"  {sid}: {dict(c)}")


if __name__ == "__main__":
    main()
