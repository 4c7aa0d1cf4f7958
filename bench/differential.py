"""The start-up scenarios' failures through real `vllm serve` and through `vllm-lab serve`.

    python bench/differential.py [--versions 0.33.0,0.19.1] [--wheel-dir DIR] [--ref-venv DIR]
                                 [--only CASE] [--write bench/DIFFERENTIAL.md]
                                 [--ref-python PYTHON] [--dump DIR]

Real vLLM runs from a reference venv outside the repository (default
~/.cache/gameday/vllm-ref-<version>, made on first use: bench/differential/refvenv.py), with
HF_HUB_OFFLINE=1 and a model folder holding only the lab engine's config.json of the model.
Configuration checks run on vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu); the world-size check
needs vLLM's CUDA platform class, which bench/differential/plugin provides without a GPU.

Each case is a scenario's failing command (its baseline from inventories/local.yaml, its
`inject` applied) run the same way through both engines, with the same model config, flags and
env. The failure lines are the first line of each engine's output matching each of the case's
patterns (the scenario's own signature regexes). Before comparing, `normalise` strips what
differs between two runs of one engine: the pid in the `(APIServer pid=N)` / `(EngineCore pid=N)`
process prefix (the name stays, so a line one engine prefixes and the other prints bare differs),
the `MM-DD HH:MM:SS` timestamp, `pid=N` / `pid N` anywhere, the free port each engine is given
(`'port': N` in the arguments line), the temporary model folder's path, and pydantic's
50-character repr of a config class's constructor arguments (`input_value=ArgsKwargs(...)`).
It prints a table (case, real vLLM line, lab engine line, equal).

Then the tracebacks, frame by frame (`tracebacks`, `compare_tracebacks`): each block of real
vLLM's output against the same block of the lab engine's, every frame's file (install prefix
replaced), line, function, source line and caret line; `view` says what a reference Python
other than the image's 3.12 leaves uncomparable. Exit 1 on any difference.
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
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from runner.labs.common.planning import edit_args
from runner.labs.common.servicelinks import cluster_ip, kubernetes_service_env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "differential"))
import refvenv  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gameday"
# the EKS start-failure write-up's model, the lab inventory's baseline
MODEL = "Qwen/Qwen2.5-14B-Instruct-AWQ"
TIMEOUT_S = 600

PROCESS_PREFIX = re.compile(
    r"^\((?P<name>(?:APIServer|EngineCore|Worker|MainProcess)(?:_DP\d+)?(?:_\w+)?) pid=\d+\)\s*"
)
TIMESTAMP = re.compile(r"\b\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\b")
PID = re.compile(r"\bpid[= ]\d+\b")
# pydantic's repr of a config class's constructor arguments, cut to 50 characters: every
# argument's value, defaults included, differs between the two engines' own arguments
PORT_ARG = re.compile(r"'port': \d+")  # each engine gets its own free port
INPUT_VALUE = re.compile(r"input_value=ArgsKwargs\(.*\), input_type=")


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    patterns: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cuda: bool = False  # vLLM's CUDA platform (the stub plugin) instead of its CPU platform
    gpus: int = 1  # the GPUs the pod sees (CUDA_VISIBLE_DEVICES; the lab's GAMEDAY_GPU_COUNT)
    occupied: bool = False  # another socket listens on the API port already


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
    # the process's name stays: whether a line carries it at all differs between releases (0.19
    # decorates stdout and stderr, 0.33 only its log records)
    line = PROCESS_PREFIX.sub(r"(\g<name>) ", line.strip())
    line = TIMESTAMP.sub("<ts>", line)
    line = PID.sub("pid <pid>", line)
    line = INPUT_VALUE.sub("input_value=ArgsKwargs(<args>), input_type=", line)
    line = PORT_ARG.sub("'port': <port>", line)
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


# ---- tracebacks, frame by frame ----------------------------------------------------------------

# what vLLM's decorated stdout and its log formatter put before a traceback's lines
LINE_HEAD = re.compile(
    r"^(?:\((?:APIServer|EngineCore|Worker|MainProcess)\w* pid=\d+\) )?"
    r"(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[\w.]+:\d+\] )?"
)
FILE_LINE = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
CARETS = re.compile(r"^ +[~^]+ *$")
# where each engine's files lie: the lab engine prints the vllm/vllm-openai image's paths
LAB_PREFIXES = (
    ("/usr/local/lib/python3.12/dist-packages/", "<site>/"),
    ("/usr/lib/python3.12/", "<stdlib>/"),
    ("/usr/local/bin/", "<bin>/"),
)
IMAGE_PYTHON = (3, 12)  # the vllm/vllm-openai image's Python


@dataclass(frozen=True)
class TbFrame:
    """One frame as printed: the file (install prefix replaced), line, function, source line
    and the caret line under it ("" where Python prints none)."""

    file: str
    line: int
    function: str
    code: str = ""
    carets: str = ""

    def show(self) -> str:
        text = f"{self.file}:{self.line} in {self.function}"
        if self.code:
            text += f": {self.code.strip()}"
        return text + (f" [{self.carets.strip()}]" if self.carets else "")


def tracebacks(output: str, prefixes: tuple[tuple[str, str], ...]) -> list[list[TbFrame]]:
    """Every `Traceback (most recent call last):` block of an output, its frames in order."""
    blocks: list[list[TbFrame]] = []
    current: list[TbFrame] | None = None
    pending: list[str] = []  # the frame's lines after its `File` line

    def close_frame() -> None:
        if current is not None and current and pending:
            f = current[-1]
            code = pending[0] if pending and not CARETS.match(pending[0]) else ""
            carets = next((p for p in pending if CARETS.match(p)), "")
            current[-1] = TbFrame(f.file, f.line, f.function, code, carets)
        pending.clear()

    for raw in output.splitlines():
        line = LINE_HEAD.sub("", raw, count=1)
        if line == "Traceback (most recent call last):":
            close_frame()
            current = []
            blocks.append(current)
            continue
        if current is None:
            continue
        hit = FILE_LINE.match(line)
        if hit:
            close_frame()
            file = hit["file"]
            for prefix, short in prefixes:
                if file.startswith(prefix):
                    file = short + file[len(prefix) :]
                    break
            current.append(TbFrame(file, int(hit["line"]), hit["function"]))
        elif line.startswith("    ") and current:
            pending.append(line)
        elif not line.startswith("  "):  # the exception's own line: the block ends
            close_frame()
            current = None
    close_frame()
    return blocks


@dataclass(frozen=True)
class TbRow:
    case: str
    block: int  # the traceback's index in the output, from 1
    real: int  # frames in real vLLM's block
    lab: int
    compared: int  # frames compared
    first_difference: str  # "" when every compared frame is equal
    not_compared: str = ""  # the frames left out, and why

    @property
    def equal(self) -> bool:
        return not self.first_difference


def view(frame: TbFrame, same_python: bool) -> TbFrame | None:
    """The frame as far as it can be compared; None when it cannot be at all. Always: the
    console script's line (the installer writes the script: pip's `vllm` is 8 lines, the
    image's 10). With a reference Python other than the image's 3.12: the event-loop runner's
    frames (uvloop.run takes a branch per Python version: on 3.11 `runner.run(wrapper())`,
    on 3.12 `__asyncio.run(...)` and asyncio's two `run` frames) are left out, the standard
    library's line numbers are not compared, nor the carets under a `with` statement's head
    (3.11 places the frame on the whole statement, 3.12 on the context expression)."""
    if frame.file.startswith("<bin>/"):
        frame = TbFrame(frame.file, 0, frame.function, frame.code, frame.carets)
    if same_python:
        return frame
    runner = frame.file == "<site>/uvloop/__init__.py" and frame.function == "run"
    if runner or frame.file.startswith("<stdlib>/asyncio/runners.py"):
        return None
    if frame.file.startswith("<stdlib>/"):
        frame = TbFrame(frame.file, 0, frame.function, frame.code, frame.carets)
    if frame.code.lstrip().startswith(("with ", "async with ")):
        frame = TbFrame(frame.file, frame.line, frame.function, frame.code, "")
    return frame


def compare_tracebacks(
    case: str, real: list[list[TbFrame]], lab: list[list[TbFrame]], same_python: bool
) -> list[TbRow]:
    rows: list[TbRow] = []
    for i in range(max(len(real), len(lab))):
        r = real[i] if i < len(real) else []
        b = lab[i] if i < len(lab) else []
        rk = [(n, v) for n, f in enumerate(r, 1) if (v := view(f, same_python)) is not None]
        bk = [(n, v) for n, f in enumerate(b, 1) if (v := view(f, same_python)) is not None]
        left = (len(r) - len(rk), len(b) - len(bk))
        note = (
            f"the event-loop runner's frames, {left[0]} real and {left[1]} lab" if any(left) else ""
        )
        diff = ""
        if i >= len(real):
            diff = "real vLLM prints no such traceback"
        elif i >= len(lab):
            diff = "the lab engine prints no such traceback"
        else:
            for (n, x), (_, y) in zip(rk, bk, strict=False):
                if x != y:  # n: the frame's place in real vLLM's traceback
                    diff = f"frame {n}: real `{x.show()}`, lab `{y.show()}`"
                    break
            else:
                if len(rk) != len(bk):
                    k = min(len(rk), len(bk))
                    n, extra = (rk if len(rk) > k else bk)[k]
                    who = "real" if len(rk) > k else "lab"
                    diff = f"frame {n}: only {who} has `{extra.show()}`"
        rows.append(TbRow(case, i + 1, len(r), len(b), min(len(rk), len(bk)), diff, note))
    return rows


def tb_table(rows: list[TbRow]) -> str:
    out = [
        "| case | traceback | real frames | lab frames | compared | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        result = "frames equal" if r.equal else r.first_difference.replace("|", "\\|")
        if r.not_compared:
            result += f" ({r.not_compared} not compared)"
        out.append(f"| {r.case} | {r.block} | {r.real} | {r.lab} | {r.compared} | {result} |")
    return "\n".join(out)


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


# every case also compares the arguments line: which ones differ from vLLM's defaults, and their
# order (vLLM's parser order)
ARGS_LINE = r"non-default args: "


def cases() -> list[Case]:
    # a headless node logs no arguments line (run_headless)
    return [
        c if "--headless" in c.args else replace(c, patterns=(ARGS_LINE, *c.patterns))
        for c in _cases()
    ]


def _cases() -> list[Case]:
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
                "Defaulting api_server_count to data_parallel_size",
                "Unknown vLLM environment variable detected: VLLM_SERVICE_HOST",
                "Unknown vLLM environment variable detected: VLLM_PORT_8000_TCP_ADDR",
                "validation error for ParallelConfig",
                "VLLM_PORT '.*' appears to be a URI",
            ),
        ),
        # the traceback cases: the unknown-variable check made fatal, and a taken API port
        Case(
            "unknown env, hard fail",
            (*base, "--fail-on-environ-validation"),
            (r"Unknown vLLM environment variable detected: VLLM_SERVICE_HOST",),
            env | {"VLLM_SERVICE_HOST": "10.100.236.130"},
        ),
        Case("port in use", tuple(base), (r"Address already in use",), env, occupied=True),
        Case(
            "headless-overflow (context overflow on a headless node)",
            (
                *edit_args(base, {"--max-model-len": 131072}),
                "--headless",
                "-tp",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
            ),
            (r"Resolved architecture", r"1 validation error for ModelConfig"),
            env,
            cuda=True,
            gpus=2,
        ),
        Case(
            "headless with API servers",
            (*base, "--headless", "--api-server-count", "1"),
            (r"cannot be used with --headless",),
            env,
        ),
    ]


# ---- running both engines -----------------------------------------------------------------------


def model_folder(tmp: Path, tag: str) -> Path:
    """A folder holding only the model's config.json, as the lab engine ships it."""
    folder = tmp / "models" / tag
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "vllmfacts" / "models" / tag / "config.json", folder / "config.json")
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_engine(command: list[str], env: dict[str, str], occupied: bool = False) -> str:
    """The combined output of one engine start (it is expected to fail), on a free loopback
    port (vLLM binds its API socket before its configuration checks), or on one another
    socket listens on (`occupied`)."""
    holder = None
    port = free_port()
    if occupied:
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = int(holder.getsockname()[1])
    try:
        done = subprocess.run(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
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
    finally:
        if holder is not None:
            holder.close()
    return done.stdout


def ref_prefixes(ref_python: Path) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The reference venv's install prefixes (site-packages, the standard library, the console
    scripts), and whether its Python is the image's (major.minor)."""
    code = (
        "import sys, sysconfig; p = sysconfig.get_paths(); "
        "print(p['purelib']); print(p['stdlib']); print(p['scripts']); "
        "print(sys.version_info[0], sys.version_info[1])"
    )
    out = subprocess.run(
        [str(ref_python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    site, stdlib, scripts, version = out
    same = tuple(int(v) for v in version.split()) == IMAGE_PYTHON
    prefixes = ((site + "/", "<site>/"), (stdlib + "/", "<stdlib>/"), (scripts + "/", "<bin>/"))
    return prefixes, same


def run_case(
    case: Case, ref_python: Path, version: str, tmp: Path
) -> tuple[list[Row], list[TbRow], str, str]:
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
    real = run_engine([str(real_cli), "serve", *args], real_env, case.occupied)
    lab_cli = str(Path(sys.executable).parent / "vllm-lab")
    lab = run_engine([lab_cli, "serve", *args], lab_env, case.occupied)
    prefix = str(tmp / case.name.split()[0] / "models")
    rows = compare(
        case.name,
        case.patterns,
        failure_lines(real, case.patterns, prefix),
        failure_lines(lab, case.patterns, prefix),
    )
    real_prefixes, same_python = ref_prefixes(ref_python)
    tb_rows = compare_tracebacks(
        case.name,
        tracebacks(real, real_prefixes),
        tracebacks(lab, LAB_PREFIXES),
        same_python,
    )
    return rows, tb_rows, real, lab


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


def base_python(given: str | None) -> str:
    """The interpreter the reference venv is made from: the given one, else this one. (The CPU
    torch the venv needs may be at hand only as a local cp311 wheel: the registry has no CPU
    build of torch 2.13 for any Python, so a 3.12 venv, the image's Python, cannot be made.)"""
    return given or sys.executable


def run_version(
    version: str, opts: argparse.Namespace
) -> tuple[list[str], list[Row], list[TbRow], str]:
    """The set-up log, the rows and the traceback rows of one vLLM release, and its Python."""
    log: list[str] = []
    venv = opts.ref_venv or CACHE / f"vllm-ref-{version}"
    wheel = find_wheel(version, opts.wheel_dir)
    python = refvenv.ensure(venv, wheel, log, base_python(opts.ref_python))
    py_version = subprocess.run(
        [str(python), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    log.append(f"reference venv Python: {py_version}")
    print("\n".join(log), flush=True)
    rows: list[Row] = []
    tb_rows: list[TbRow] = []
    with tempfile.TemporaryDirectory(prefix="gameday-diff-") as tmp:
        for case in cases():
            if opts.only and not case.name.startswith(opts.only):
                continue
            got, got_tb, real, lab = run_case(case, python, version, Path(tmp))
            rows += got
            tb_rows += got_tb
            if opts.dump:
                opts.dump.mkdir(parents=True, exist_ok=True)
                stem = f"{version}-{case.name.split()[0]}"
                (opts.dump / f"{stem}-real.txt").write_text(real)
                (opts.dump / f"{stem}-lab.txt").write_text(lab)
            if not all(r.equal for r in got):
                print(f"--- {case.name}: real vLLM said\n{real[-4000:]}")
                print(f"--- {case.name}: the lab engine said\n{lab[-4000:]}")
    return log, rows, tb_rows, py_version


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--versions", default="0.33.0,0.19.1", help="vllm releases, comma-separated (both eras)"
    )
    ap.add_argument("--wheel-dir", type=Path, help="where the vllm wheels lie (else the cache)")
    ap.add_argument("--ref-venv", type=Path, help="the reference venv (one release only)")
    ap.add_argument("--only", help="run only the cases whose name starts with this")
    ap.add_argument("--write", type=Path, help="also write the report (Markdown) here")
    ap.add_argument(
        "--ref-python", help="the interpreter to make a missing reference venv from (else this one)"
    )
    ap.add_argument("--dump", type=Path, help="write each engine's whole output into this folder")
    opts = ap.parse_args()
    sections: list[str] = []
    differ = 0
    for version in opts.versions.split(","):
        log, rows, tb_rows, _ = run_version(version, opts)
        bad = sum(not r.equal for r in rows)
        tb_bad = sum(not r.equal for r in tb_rows)
        differ += bad + tb_bad
        frames = sum(r.compared for r in tb_rows)
        summary = (
            f"vllm {version}: {len(rows) - bad} equal, {bad} different; tracebacks: "
            f"{len(tb_rows)} compared ({frames} frames), {tb_bad} different"
        )
        body = f"{table(rows)}\n\n### Tracebacks, frame by frame\n\n{tb_table(tb_rows)}"
        print(body + "\n\n" + summary, flush=True)
        sections.append(f"## vllm {version}\n\n{chr(10).join(log)}\n\n{body}\n\n{summary}\n")
    if opts.write:
        head = opts.write.read_text().split("\n## vllm ")[0] if opts.write.exists() else ""
        opts.write.write_text(
            (head or "# Differential run\n").rstrip("\n") + "\n\n" + "\n".join(sections)
        )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
