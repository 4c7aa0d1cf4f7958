"""gameday soak: the safety figures (leftovers, tracebacks, verdict changes). Prints, asserts
nothing.

    python bench/soak.py [--kills 50] [--labs local,compose] [--runs 20] [--fuzz 5000] [--seed 1]

- kills: on each lab, a scenario run SIGKILLed at a random moment, then `gameday cleanup`;
  counts the leftovers found afterwards (engine configs, stray processes, moved addresses,
  scrape config, nodes not serving, open journal entries; on the compose lab also containers,
  networks and volumes beyond the lab's own). Goal 0. The compose lab needs Docker and builds its
  image when it is missing (cached).
- fuzz: hostile scenarios and inventories (`validate`, `validate --lab`), result.json files
  (`report`) and logs (`triage`, `timeline LOG@ZONE --year`): structured mutations of the real
  files, truncations, hostile splices, deep nesting and random bytes, run through the CLI's
  commands in-process; counts tracebacks (any exception a command lets out). Goal 0.
- runs: every scenario run N times on the local lab; counts verdict changes. Goal 0.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.labs import open_lab  # noqa: E402
from runner.labs.base import LabDriver  # noqa: E402
from runner.results.schema import (  # noqa: E402
    Assertion,
    Evidence,
    EvidenceLine,
    LabInfo,
    RunResult,
    ScenarioResult,
    TimelineEvent,
    Verdict,
)
from runner.run import journal  # noqa: E402
from runner.run.suite import run_suite  # noqa: E402
from runner.run.undo import cleanup_lab  # noqa: E402
from runner.spec.inventory_load import load_inventory  # noqa: E402
from runner.spec.kinds import LabKind  # noqa: E402
from runner.spec.scenario import load_scenario  # noqa: E402

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
            found = lab.leftovers() + [
                f"open journal {c.seq}" for c in journal.open_changes(lab.state_dir)
            ]
            leftovers += [f"kill {i} ({scenario.stem} at {delay:.1f} s): {p}" for p in found]
    return n, leftovers


HOSTILE: list[object] = [
    None,
    0,
    -1,
    1e308,
    float("inf"),
    float("nan"),
    "",
    "x" * 10_000,
    [],
    {},
    [[[]]],
    True,
    "{{",
    "(a+)+",
    {"kind": "nope"},
    {1: "x"},
    ["--max-model-len"],
    "$(reboot)",
    "[/]",
    "[bold]x[/]",
    "\x1b]8;;http://x\x1b\\x",
    "tp_group",
    "nod2",
    "9" * 5000,
    "2001-13-45",
]
# YAML text that no dump of Python values produces
YAML_HOSTILE = [
    "9" * 5000,
    "2001-13-45",
    "2001-12-14t21:59:43.10-05:00",
    "!!float x",
    "!!bool maybe",
    "!!int 0x",
    "!!binary '%%%'",
    ".inf",
    "-.inf",
    ".nan",
    "[/]",
    "{1: x}",
    "[" * 60 + "]" * 60,
    "*nowhere",
    "!!python/object:os.system 'true'",
]
# log lines in the formats timeline and triage read, with fields out of range as often as in
LOG_SAMPLES = [
    "(APIServer pid=1) INFO {mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d} [api_server.py:1] Starting",
    "(EngineCore pid=81) ERROR {mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d} [core.py:1108] "
    "EngineCore failed to start.",
    "2026-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.123456789Z (APIServer pid=1) INFO: [/] done",
    "2026-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}+09:00 kernel: NVRM: NV_ERR_NO_MEMORY",
    "2026-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d} dockerd: health status: healthy",
    "{mon} {d:2d} {h:02d}:{mi:02d}:{s:02d} host sshd[1]: Accepted publickey",
    "[rank1]:[W{mo:02d}{d:02d} {h:02d}:{mi:02d}:{s:02d}.97 ProcessGroupNCCL.cpp:1] [/] Broken pipe",
    "User-specified max_model_len (131072) is greater than the derived max_model_len "
    "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json).",
    "(EngineCore pid=81) ValueError: To serve at least one request with the models's max seq len "
    "(16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory",
    "Loading weights took 12.3 seconds",
    "\x1b[31mred\x1b[0m \x00 \x1b]8;;http://evil\x1b\\link",
]
ZONES = ["", "UTC", "Asia/Seoul", "America/New_York", "America", "Asia", "../../etc", "/etc/passwd"]
ZONES += ["Nowhere/Land", "UTC\x00", "posixrules", "Etc/GMT+14"]


def mutate(data: object, rnd: random.Random) -> object:
    if isinstance(data, dict) and data and rnd.random() < 0.8:
        k = rnd.choice(list(data))
        r = rnd.random()
        if r < 0.15:
            data.pop(k)
        elif r < 0.2:
            data[rnd.choice([1, None, "[/]", "gameday_x", "x" * 300])] = data.pop(k)
        else:
            data[k] = mutate(data[k], rnd)
        return data
    if isinstance(data, list) and data and rnd.random() < 0.8:
        i = rnd.randrange(len(data))
        data[i] = mutate(data[i], rnd)
        return data
    if isinstance(data, dict | list) and rnd.random() < 0.3:
        return list(data) if isinstance(data, dict) else {str(i): v for i, v in enumerate(data)}
    return copy.deepcopy(rnd.choice(HOSTILE))


def mutated_text(text: str, rnd: random.Random, as_json: bool) -> bytes:
    """A structured mutation of a real file, a truncation, a splice of hostile text at a random
    place, or random bytes."""
    r = rnd.random()
    if r < 0.15:
        return text[: rnd.randrange(len(text) + 1)].encode()
    if r < 0.3:
        at = rnd.randrange(len(text) + 1)
        return (text[:at] + rnd.choice(YAML_HOSTILE) + text[at:]).encode()
    if r < 0.37:
        return rnd.randbytes(rnd.randrange(1, 4000))
    if r < 0.42:
        depth = rnd.choice([50, 1000, 100_000])
        return ("[" * depth + "]" * depth if as_json else "a: " + "[" * depth).encode()
    data = yaml.safe_load(text) if not as_json else json.loads(text)
    for _ in range(rnd.randint(1, 4)):
        data = mutate(data, rnd)
    if as_json:
        return json.dumps(data, default=str, allow_nan=True).encode()
    return yaml.safe_dump(data, allow_unicode=rnd.random() < 0.5).encode()


def log_text(rnd: random.Random) -> bytes:
    if rnd.random() < 0.1:
        return rnd.randbytes(rnd.randrange(1, 4000))
    months = ["Jan", "Feb", "Mar", "Apr", "Dec", "Foo", "Feb"]

    def field(top: int) -> int:  # in range most of the time, out of it sometimes
        return rnd.randrange(top) if rnd.random() < 0.9 else rnd.choice([0, 13, 31, 32, 60, 99])

    lines = []
    for _ in range(rnd.randint(1, 30)):
        line = rnd.choice(LOG_SAMPLES).format(
            mo=field(12) + 1,
            d=field(28) + 1,
            h=field(24),
            mi=field(60),
            s=field(60),
            mon=rnd.choice(months),
        )
        if rnd.random() < 0.1:
            at = rnd.randrange(len(line) + 1)
            line = (
                line[:at]
                + rnd.choice(["[/]", "\x00", "\udcff", "9" * 5000, "x" * 70_000])
                + line[at:]
            )
        lines.append(line)
    return "\n".join(lines).encode("utf-8", errors="surrogateescape")


def sample_result() -> str:
    """result.json of a small run, built from the result models."""
    now = datetime.now(UTC)
    ev = [TimelineEvent(ts=now, source="log:serving", clock="runtime (UTC)", event="exited 1")]
    sc = ScenarioResult(
        id="context-window-overflow",
        title="max-model-len above the model's context window",
        file="scenarios/context-window-overflow.yaml",
        lab="local",
        verdict=Verdict.FAILED,
        time_to_fail_s=9.0,
        time_to_recover_s=None,
        time_to_detect_s=1.5,
        started_at=now,
        finished_at=now,
        assertions=[
            Assertion(
                name="exit code", phase="expect", verdict=v, expected="1", observed="0", detail=""
            )
            for v in Verdict
        ],
        timeline=ev,
        evidence=[Evidence(title="logs", lines=[EvidenceLine(ts=now, text="x", highlight=True)])],
        notes=["local lab: emulated"],
    )
    result = RunResult(
        run_id="20261130T000000Z-abcdef",
        gameday_version="0",
        started_at=now,
        finished_at=now,
        lab=LabInfo(
            name="local", kind="local", inventory="i.yaml", time_scale=100, timing_allowance_s=0.1
        ),
        verdict=Verdict.FAILED,
        scenarios=[sc, sc.model_copy(update={"id": "tp-mismatch", "verdict": Verdict.ERROR})],
    )
    return result.model_dump_json(indent=2)


def fuzz(n: int, rnd: random.Random) -> tuple[int, Counter[str], list[str]]:
    """Hostile files through the CLI's own commands, in-process (click's test runner: the same
    code path, error mapping included, without a process per input). A traceback is any
    exception that escapes a command; a command's exit code must be 0, 1 (triage: nothing
    recognised; report: a failed run), 2 or 3."""
    from click.testing import CliRunner

    from runner.cli.main import main

    cli = CliRunner()
    tracebacks: list[str] = []
    kinds: Counter[str] = Counter()
    inventories = sorted((ROOT / "inventories").glob("*.yaml"))
    result_json = sample_result()
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        (work / "scenarios").mkdir()
        for s in SCENARIOS:
            (work / "scenarios" / s.name).write_bytes(s.read_bytes())
        for i in range(n):
            kind = rnd.choice(["scenario", "inventory", "result", "log"])
            if kind == "scenario":
                src = rnd.choice(SCENARIOS)
                p = work / f"{i}.yaml"
                p.write_bytes(mutated_text(src.read_text(), rnd, as_json=False))
                lab = ["--lab", str(INVENTORY)]
                argv = rnd.choice(
                    [["validate", str(p)], ["validate", str(p), *lab], ["list", str(p)]]
                )
            elif kind == "inventory":
                src = rnd.choice(inventories)
                p = work / f"{i}.yaml"
                p.write_bytes(mutated_text(src.read_text(), rnd, as_json=False))
                argv = (
                    ["validate", str(p)]
                    if rnd.random() < 0.5
                    else ["validate", str(rnd.choice(SCENARIOS)), "--lab", str(p)]
                )
            elif kind == "result":
                p = work / f"run{i}" / "result.json"
                p.parent.mkdir()
                p.write_bytes(mutated_text(result_json, rnd, as_json=True))
                argv = ["report", str(p.parent)]
            else:
                p = work / f"{i}.log"
                p.write_bytes(log_text(rnd))
                if rnd.random() < 0.5:
                    argv = ["triage", str(p), "--scenarios", str(work / "scenarios")]
                else:
                    argv = ["timeline", f"{p}@{rnd.choice(ZONES)}"]
                    if rnd.random() < 0.3:
                        argv += ["--year", str(rnd.choice([-1, 0, 1, 1970, 2026, 9999, 10**6]))]
            got = cli.invoke(main, argv)
            kinds[f"{kind} exit {got.exit_code}"] += 1
            if got.exception is not None and not isinstance(got.exception, SystemExit):
                exc = got.exception
                tracebacks.append(f"{kind} {' '.join(argv)}: {type(exc).__name__}: {exc}"[:300])
            elif got.exit_code not in (0, 1, 2, 3):
                tracebacks.append(f"{kind} {' '.join(argv)}: exit {got.exit_code}")
    return n, kinds, tracebacks


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

    fuzz_started = time.monotonic()
    n_fuzz, kinds, tracebacks = fuzz(args.fuzz, rnd)
    print(
        f"fuzzed inputs: {n_fuzz} ({', '.join(f'{k} {c}' for k, c in sorted(kinds.items()))}), "
        f"tracebacks: {len(tracebacks)}, {time.monotonic() - fuzz_started:.0f} s"
    )
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
                leftovers += [f"after lab down: {o}" for o in lab.leftover_objects()]
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
