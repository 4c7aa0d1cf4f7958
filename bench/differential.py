"""The start-up scenarios' failures through real `vllm serve` and through `vllm-lab serve`.

    python bench/differential.py [--versions 0.33.0,0.19.1] [--wheel-dir DIR] [--ref-venv DIR]
                                 [--only CASE] [--write bench/DIFFERENTIAL.md]

Real vLLM runs from a reference venv outside the repository (default
~/.cache/gameday/vllm-ref-<version>, made on first use: bench/differential/refvenv.py), with
HF_HUB_OFFLINE=1 and a model folder holding only the lab engine's config.json of the model.
Configuration checks run on vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu); the world-size check
needs vLLM's CUDA platform class, which bench/differential/plugin provides without a GPU.

Each case is a scenario's failing command (its baseline from inventories/local.yaml, its
`inject` applied) run the same way through both engines, with the same model config, flags and
env. The failure lines are the first line of each engine's output matching each of the case's
patterns (the scenario's own signature regexes). Before comparing, `normalise` strips what
differs between two runs of one engine: the `(APIServer pid=N)` / `(EngineCore pid=N)` process
prefix (`_DP<n>` suffix included), the `MM-DD HH:MM:SS` timestamp, `pid=N` / `pid N` anywhere,
and the temporary model folder's path, and pydantic's 50-character repr of a config class's
constructor arguments (`input_value=ArgsKwargs(...)`). It prints a table (case, real vLLM line,
lab engine line, equal); exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from runner.labs.planning import edit_args
from runner.labs.servicelinks import cluster_ip, kubernetes_service_env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "differential"))
import refvenv  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gameday"
MODEL = "Qwen/Qwen2.5-14B-Instruct-AWQ"  # the seeds' model, the lab inventory's baseline
TIMEOUT_S = 600

PROCESS_PREFIX = re.compile(
    r"^\((?:APIServer|EngineCore|Worker|MainProcess)(?:_DP\d+)?(?:_\w+)? pid=\d+\)\s*"
)
TIMESTAMP = re.compile(r"\b\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\b")
PID = re.compile(r"\bpid[= ]\d+\b")
# pydantic's repr of a config class's constructor arguments, cut to 50 characters: every
# argument's value, defaults included, differs between the two engines' own arguments
INPUT_VALUE = re.compile(r"input_value=ArgsKwargs\(.*\), input_type=")


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    patterns: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cuda: bool = False  # vLLM's CUDA platform (the stub plugin) instead of its CPU platform
    gpus: int = 1  # the GPUs the pod sees (CUDA_VISIBLE_DEVICES; the lab's GAMEDAY_GPU_COUNT)


@dataclass(frozen=True)
class Row:
    case: str
    pattern: str
    real: str
    lab: str

    @property
    def equal(self) -> bool:
        return self.real != "" and self.real == self.lab


def normalise(line: str, model_dir: str = "") -> str:
    """A failure line without what differs between two runs (see the module's docstring)."""
    line = PROCESS_PREFIX.sub("", line.strip())
    line = TIMESTAMP.sub("<ts>", line)
    line = PID.sub("pid <pid>", line)
    line = INPUT_VALUE.sub("input_value=ArgsKwargs(<args>), input_type=", line)
    if model_dir:
        line = line.replace(model_dir.rstrip("/") + "/", "")
    return line


def failure_lines(output: str, patterns: tuple[str, ...], model_dir: str = "") -> list[str]:
    """For each pattern, the first output line it matches, normalised ("" where none does)."""
    lines = output.splitlines()
    found = []
    for pattern in patterns:
        rx = re.compile(pattern)
        hit = next((ln for ln in lines if rx.search(ln)), None)
        found.append("" if hit is None else normalise(hit, model_dir))
    return found


def compare(case: str, patterns: tuple[str, ...], real: list[str], lab: list[str]) -> list[Row]:
    return [Row(case, p, r, b) for p, r, b in zip(patterns, real, lab, strict=True)]


# ---- the cases, from the scenarios ---------------------------------------------------------------


def baseline() -> tuple[list[str], dict[str, str]]:
    inv = yaml.safe_load((ROOT / "inventories" / "local.yaml").read_text())
    host = inv["all"]["children"]["serving"]["hosts"]["serving"]
    args = [a for a in host["gameday_engine_args"] if "{" not in a]
    args = [a for a in args if a not in ("--host", "--port")]
    return args, dict(host["gameday_engine_env"])


def scenario_case(
    name: str,
    extra: dict[str, str | int] | None = None,
    cuda: bool = False,
    patterns: tuple[str, ...] = (),
) -> Case:
    doc = yaml.safe_load((ROOT / "scenarios" / f"{name}.yaml").read_text())
    args, env = baseline()
    for step in doc["inject"]:
        if step["kind"] == "set_args":
            args = edit_args(args, step["args"])
        elif step["kind"] == "service_links":
            service = step["service"]
            env |= kubernetes_service_env(service, cluster_ip(service), step["port"])
    if extra:
        args = edit_args(args, dict(extra))
    patterns = patterns or tuple(s["regex"] for s in doc["expect"]["signature"]["in_order"])
    return Case(name, tuple(args), patterns, env, cuda)


def cases() -> list[Case]:
    base, env = baseline()
    qwen7 = edit_args(base, {"model_tag": "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size": 3})
    return [
        scenario_case("context-window-overflow"),
        scenario_case(
            "tp-mismatch",
            cuda=True,
            patterns=(
                r"1 validation error for ParallelConfig",
                r"World size \(\d+\) is larger than the number of available GPUs",
                r"^(\(\w+ pid=\d+\) )?- ray, set",
                r"^(\(\w+ pid=\d+\) )?- multiprocessing, set",
            ),
        ),
        Case(
            "tp-divisibility (28 heads, TP 3)",
            tuple(qwen7),
            (
                r"validation error for VllmConfig",
                r"Total number of attention heads \(\d+\) must be divisible by tensor parallel",
            ),
            env,
            gpus=4,
        ),
        # A plain 0.33 serve reads VLLM_PORT at the end of engine-core start, after the weights;
        # a data-parallel group reads it while setting up, before any weights.
        scenario_case(
            "service-name-collision",
            {"--data-parallel-size": 2},
            patterns=(
                "Unknown vLLM environment variable detected: VLLM_SERVICE_HOST",
                "Unknown vLLM environment variable detected: VLLM_PORT_8000_TCP_ADDR",
                "validation error for ParallelConfig",
                "VLLM_PORT '.*' appears to be a URI",
            ),
        ),
    ]


# ---- running both engines -----------------------------------------------------------------------


def model_folder(tmp: Path, tag: str) -> Path:
    """A folder holding only the model's config.json, as the lab engine ships it."""
    folder = tmp / "models" / tag
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "labengine" / "models" / tag / "config.json", folder / "config.json")
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_engine(command: list[str], env: dict[str, str]) -> str:
    """The combined output of one engine start (it is expected to fail), on a free loopback
    port (vLLM binds its API socket before its configuration checks)."""
    try:
        done = subprocess.run(
            [*command, "--host", "127.0.0.1", "--port", str(free_port())],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or ""
        return (out if isinstance(out, str) else out.decode()) + "\n<timed out>"
    return done.stdout


def run_case(case: Case, ref_python: Path, version: str, tmp: Path) -> tuple[list[Row], str, str]:
    folder = model_folder(tmp / case.name.split()[0], case.args[0])
    args = [str(folder), *case.args[1:]]
    common = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], **case.env}
    visible = ",".join(str(i) for i in range(case.gpus))
    common |= {"HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": visible}
    # 0.19 picks its CPU platform only for a CPU build of vLLM (a "cpu" version) or macOS:
    # VLLM_TARGET_DEVICE is read at build time only, so every 0.19 case runs on the CUDA class
    cuda = case.cuda or version.startswith("0.19.")
    real_env = common | ({"GAMEDAY_CUDA_STUB": "1"} if cuda else {"VLLM_TARGET_DEVICE": "cpu"})
    lab_env = common | {
        "GAMEDAY_VLLM_ERA": ".".join(version.split(".")[:2]),
        "GAMEDAY_GPU": "a10g",
        "GAMEDAY_GPU_COUNT": str(case.gpus),
        "GAMEDAY_TIME_SCALE": "100",
    }
    real_cli = ref_python.parent / "vllm"
    real = run_engine([str(real_cli), "serve", *args], real_env)
    lab = run_engine([str(Path(sys.executable).parent / "vllm-lab"), "serve", *args], lab_env)
    prefix = str(tmp / case.name.split()[0] / "models")
    rows = compare(
        case.name,
        case.patterns,
        failure_lines(real, case.patterns, prefix),
        failure_lines(lab, case.patterns, prefix),
    )
    return rows, real, lab


def table(rows: list[Row]) -> str:
    out = ["| case | real vLLM line | lab engine line | equal |", "| --- | --- | --- | --- |"]
    for r in rows:
        real = r.real.replace("|", "\\|") or "(no line)"
        lab = r.lab.replace("|", "\\|") or "(no line)"
        out.append(f"| {r.case} | `{real}` | `{lab}` | {'yes' if r.equal else 'NO'} |")
    return "\n".join(out)


def find_wheel(version: str, wheel_dir: Path | None) -> Path:
    for d in [wheel_dir, CACHE / "vllm" / "wheels", Path("/tmp/vllm-dl")]:
        if d is not None and (found := sorted(d.glob(f"vllm-{version}-*.whl"))):
            return found[0]
    dest = CACHE / "vllm" / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
    subprocess.run([*pip, f"vllm=={version}"], check=True)
    return sorted(dest.glob(f"vllm-{version}-*.whl"))[0]


def run_version(version: str, opts: argparse.Namespace) -> tuple[list[str], list[Row]]:
    """The set-up log and the rows of one vLLM release."""
    log: list[str] = []
    venv = opts.ref_venv or CACHE / f"vllm-ref-{version}"
    python = refvenv.ensure(venv, find_wheel(version, opts.wheel_dir), log)
    print("\n".join(log), flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gameday-diff-") as tmp:
        for case in cases():
            if opts.only and not case.name.startswith(opts.only):
                continue
            got, real, lab = run_case(case, python, version, Path(tmp))
            rows += got
            if not all(r.equal for r in got):
                print(f"--- {case.name}: real vLLM said\n{real[-4000:]}")
                print(f"--- {case.name}: the lab engine said\n{lab[-4000:]}")
    return log, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--versions", default="0.33.0,0.19.1", help="vllm releases, comma-separated (both eras)"
    )
    ap.add_argument("--wheel-dir", type=Path, help="where the vllm wheels lie (else the cache)")
    ap.add_argument("--ref-venv", type=Path, help="the reference venv (one release only)")
    ap.add_argument("--only", help="run only the cases whose name starts with this")
    ap.add_argument("--write", type=Path, help="also write the report (Markdown) here")
    opts = ap.parse_args()
    sections: list[str] = []
    differ = 0
    for version in opts.versions.split(","):
        log, rows = run_version(version, opts)
        bad = sum(not r.equal for r in rows)
        differ += bad
        summary = f"vllm {version}: {len(rows) - bad} equal, {bad} different"
        print(table(rows) + "\n\n" + summary, flush=True)
        sections.append(f"## vllm {version}\n\n{chr(10).join(log)}\n\n{table(rows)}\n\n{summary}\n")
    if opts.write:
        head = opts.write.read_text().split("\n## vllm ")[0] if opts.write.exists() else ""
        opts.write.write_text(
            (head or "# Differential run\n").rstrip("\n") + "\n\n" + "\n".join(sections)
        )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
