"""The lab engine's words against vLLM's own source, for each wording era (0.19.1, 0.33.0).

    python bench/conformance.py [--wheel-dir DIR] [--write bench/CONFORMANCE.md]

For each era it takes the real `vllm` wheel (from --wheel-dir, else `pip download vllm==<v>
--no-deps` into the cache), reads its source with `ast` (nothing of vLLM is imported) and checks:

- messages: `vllm-lab serve` is run through the start-up cases below; every log record it prints
  (`LEVEL <ts> [file:line] message`) must match a logger call of the same level in vLLM's source,
  and every exception message (`Type: message`, pydantic's `Value error, message`) a string of
  vLLM's source. A source template matches when its text is equal with each placeholder (`%s`,
  `{expr}`) standing for any text; a placeholder naming a string assigned in the same function
  stands for that string's template.
- locations: every log record's `[file:N]` is the place of a logger call in the wheel that
  prints that message at that level (the basename and the line equal).
- tracebacks: every frame of every traceback the lab engine can print for the era
  (labengine.tracebacks) names a file of the wheel, line N of it holds the frame's code
  (stripped), N lies inside the named function, and its caret line is the one Python 3.12
  prints (the executing expression underlined unless it spans the whole line: a call of the
  next frame's function, its `await`, a `with` statement's context expression, an `envs.X`
  read). Frames outside the `vllm` package (Python's standard library, uvloop, pydantic,
  triton, the `vllm` console script) are counted, not checked; bench/differential.py compares
  them against real runs.
- traceback chains: for each pair of consecutive frames in the `vllm` package, frame i's
  statement calls frame i+1's function (by name, as a constructor, through a module's
  __getattr__, vLLM's CLI dispatch or envs.py's getter table), and the frames between them are
  the ones its decorators and event loop put there (otel's sync_wrapper, contextlib's
  __aenter__/__enter__/__exit__, uvloop's and asyncio's runners); a link that is not is a
  skipped link. NOT_REBUILT names the tracebacks whose frames under the busy loop are a known
  gap, and why.
- progress bars: a tqdm bar the lab engine prints (`desc: NN% Completed | n/N [...]`) must be
  in the format vLLM prints its bars in (weight_utils._BAR_FORMAT), with a description that is
  a string of vLLM's source.
- env names: the lab engine's known names for the era are exactly the VLLM_* keys of
  `environment_variables` in that era's vllm/envs.py.
- flags: every option `vllm-lab serve` accepts is one `vllm serve` registers (the option strings
  of `add_argument` calls in its argument modules and the frontend dataclasses' fields).

It prints a table (case, vLLM, lab engine, equal) and the differences; exit 1 if any.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import os
import re
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from labengine.logs import Frame
from labengine.tracebacks import era_tracebacks
from vllmfacts.envs import known
from vllmfacts.serveflags import add_serve_arguments
from vllmfacts.wording import Era

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gameday" / "vllm"
LOG_LEVELS = {
    "INFO": {"info", "info_once"},
    "WARNING": {"warning", "warning_once", "warn"},
    "ERROR": {"error", "exception", "error_once"},
}
PERCENT = re.compile(r"%(?:\(\w+\))?[-+ #0]*\d*(?:\.\d+)?[sdifrxg%]")
PLACEHOLDER = "\x00"  # a placeholder's mark inside a template before it becomes a regex


# ---- vLLM's source ------------------------------------------------------------------------------


def source_tree(era: Era, wheel_dir: Path | None) -> Path:
    """The wheel's `vllm/` sources, unpacked once into the cache."""
    version = era.version
    root = CACHE / f"src-{version}"
    if (root / "vllm" / "envs.py").exists():
        return root / "vllm"
    wheels = CACHE / "wheels"
    found = sorted((wheel_dir or wheels).glob(f"vllm-{version}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "-d",
                str(wheels),
                f"vllm=={version}",
            ],
            check=True,
        )
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(root, [n for n in zf.namelist() if n.startswith("vllm/") and n[-3:] == ".py"])
    return root / "vllm"


@dataclass(frozen=True)
class Template:
    where: str  # file:line in the wheel
    level: str | None  # the logger method, None for any other string
    pattern: re.Pattern[str]
    literal: str  # its longest literal run, for a quick pre-filter
    text: str  # the template, placeholders marked


class _Templates(ast.NodeVisitor):
    """Every string expression of a module, as templates; logger calls' with their level."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.found: list[Template] = []
        self.defaults: list[dict[str, ast.expr]] = [{}]  # parameters' default values
        self.scopes: list[dict[str, list[ast.expr]]] = [{}]

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A name stands for its strings only when every binding of it in the function is one."""
        local: dict[str, list[ast.expr]] = {}
        opaque = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        stringy: set[int] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1:
                target = sub.targets[0]
                if isinstance(target, ast.Name) and self._stringy(sub.value):
                    local.setdefault(target.id, []).append(sub.value)
                    stringy.add(id(target))
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Name)
                and isinstance(sub.ctx, ast.Store)
                and id(sub) not in stringy
            ):
                opaque.add(sub.id)
        self.scopes.append({k: v for k, v in local.items() if k not in opaque})
        params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
        positional = params[len(params) - len(node.args.defaults) :]
        defaults = dict(zip(positional, node.args.defaults, strict=True))
        for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True):
            if default is not None:
                defaults[arg.arg] = default
        self.defaults.append(defaults)
        self.generic_visit(node)
        self.defaults.pop()
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    @staticmethod
    def _stringy(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return _Templates._stringy(node.left) or _Templates._stringy(node.right)
        return isinstance(node, ast.JoinedStr)

    def _text(self, node: ast.expr, depth: int = 0) -> str:
        """The template text, placeholders marked; names of local strings expanded once."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(self._text(v, depth) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            return self._name(node.value, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._text(node.left, depth) + self._text(node.right, depth)
        return PLACEHOLDER

    def _name(self, node: ast.expr, depth: int) -> str:
        options = self.scopes[-1].get(node.id, []) if isinstance(node, ast.Name) else []
        if not options or depth > 1:
            return PLACEHOLDER
        return "\x01" + "\x02".join(self._text(o, depth + 1) for o in options) + "\x03"

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        method = func.attr if isinstance(func, ast.Attribute) else None
        if method in set().union(*LOG_LEVELS.values()) and node.args:
            fmt = node.args[0]
            if isinstance(fmt, ast.Constant) and isinstance(fmt.value, str):
                args = iter(node.args[1:])
                text = PERCENT.sub(
                    lambda m: "%" if m.group() == "%%" else self._name(next(args, fmt), 0),
                    fmt.value,
                )
                self._add(node, method, text)
            elif self._stringy(fmt):
                self._add(node, method, self._text(fmt))
            elif isinstance(fmt, ast.Name) and fmt.id in self.defaults[-1]:
                # a format passed as a parameter (monitor.py's `message`): its default value
                default = self.defaults[-1][fmt.id]
                if isinstance(default, ast.Constant) and isinstance(default.value, str):
                    text = PERCENT.sub(
                        lambda m: "%" if m.group() == "%%" else PLACEHOLDER, default.value
                    )
                    self._add(node, method, text)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) >= 12:
            self._add(node, None, node.value)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        self._add(node, None, self._text(node))

    def _add(self, node: ast.expr, level: str | None, text: str) -> None:
        # the longest literal run outside the expanded names' alternatives, which may be empty
        top = text
        while (shorter := re.sub("\x01[^\x01\x03]*\x03", PLACEHOLDER, top)) != top:
            top = shorter
        literal = max(re.split("[\x00-\x03]", top), key=len)
        if len(re.sub("[\x00-\x03]", "", text)) < 8:
            return
        self.found.append(
            Template(f"{self.path}:{node.lineno}", level, _regex(text), literal, text)
        )


def _regex(text: str) -> re.Pattern[str]:
    out = []
    for ch in text:
        out.append(
            {PLACEHOLDER: ".*?", "\x01": "(?:", "\x02": "|", "\x03": ")"}.get(ch) or re.escape(ch)
        )
    return re.compile("".join(out), re.DOTALL)


def templates(tree: Path) -> list[Template]:
    found: list[Template] = []
    for path in sorted(tree.rglob("*.py")):
        try:
            module = ast.parse(path.read_text("utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        visitor = _Templates(str(path.relative_to(tree.parent)))
        visitor.visit(module)
        found += visitor.found
    return found


def env_names(tree: Path) -> set[str]:
    module = ast.parse((tree / "envs.py").read_text("utf-8"))
    for node in ast.walk(module):
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if (
            isinstance(target, ast.Name)
            and target.id == "environment_variables"
            and isinstance(value, ast.Dict)
        ):
            return {
                k.value
                for k in value.keys
                if isinstance(k, ast.Constant)
                and isinstance(k.value, str)
                and k.value.startswith("VLLM_")
            }
    raise SystemExit(f"{tree}/envs.py: no environment_variables mapping")


def serve_flags(tree: Path) -> set[str]:
    """The option strings `vllm serve` registers."""
    files = [tree / "engine" / "arg_utils.py", tree / "entrypoints" / "cli" / "serve.py"]
    files += list((tree / "entrypoints").glob("*/cli_args.py"))
    flags: set[str] = {"--help", "-h"}
    for path in files:
        module = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(module):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                flags |= {
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant)
                    and isinstance(a.value, str)
                    and a.value.startswith("-")
                }
            if isinstance(node, ast.ClassDef) and node.name.endswith("FrontendArgs"):
                flags |= {
                    "--" + s.target.id.replace("_", "-")
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
    return flags


# ---- what the lab engine prints ---------------------------------------------------------------

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
# (case, argv after `serve`, extra environment, the text after which the run is stopped)
LORA_R64 = "gameday-lab/qwen2.5-14b-sql-lora-r64"  # adapter_config.json: r 64
CASES: list[tuple[str, list[str], dict[str, str], str | None]] = [
    ("healthy start", [QWEN, "--max-model-len", "4096"], {}, "Application startup complete"),
    ("kv-cache shortage", [QWEN, "--gpu-memory-utilization", "0.5", "--max-model-len", "16384"],
     {}, None),
    ("no KV memory", [QWEN, "--gpu-memory-utilization", "0.4"], {}, None),
    ("context overflow", ["--model", QWEN, "--max-model-len", "131072"], {}, None),
    ("long max len allowed", [QWEN, "--max-model-len", "65536"],
     {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, None),
    ("world size", [QWEN, "-tp", "2"], {}, None),
    ("TP and heads", [QWEN, "-tp", "3"], {"GAMEDAY_GPU_COUNT": "4"}, None),
    ("VLLM_PORT URI", [QWEN], {"VLLM_PORT": "tcp://10.0.0.1:8000", "VLLM_SERVICE_HOST": "x"},
     None),
    ("VLLM_PORT not an integer", [QWEN], {"VLLM_PORT": "10.0.0.1:8000"}, None),
    ("unknown env, hard fail", [QWEN, "--fail-on-environ-validation"],
     {"VLLM_SERVICE_HOST": "x"}, None),
    ("group head", [QWEN, "-tp", "2", "--nnodes", "2", "--node-rank", "0"], {}, "DP group"),
    ("headless node", [QWEN, "-tp", "2", "--nnodes", "2", "--node-rank", "1", "--headless"],
     {}, "headless multiproc executor"),
    ("data parallel, VLLM_PORT URI", [QWEN, "-dp", "2"],
     {"GAMEDAY_GPU_COUNT": "2", "VLLM_PORT": "tcp://10.0.0.1:8000"}, None),
    ("headless with API servers", [QWEN, "--headless", "--api-server-count", "1"], {}, None),
    ("LoRA rank above the max", [QWEN, "--enable-lora", "--lora-modules", f"sql={LORA_R64}"], {},
     None),
]  # fmt: skip

RECORD = re.compile(r"^(?:\((?P<proc>\w+) pid=\d+\) )?(?P<level>[A-Z]+) \d\d-\d\d [\d:]{8} "
                    r"\[(?P<where>[\w.]+:\d+)\] (?P<msg>.*)$")  # fmt: skip
# a tqdm bar printed as text with vLLM's bar format (weight_utils._BAR_FORMAT); prefixed on
# 0.19's decorated stderr, bare on 0.33's
BAR = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?P<desc>[^:]+): +\d+% Completed \| \d+/\d+ "
                 r"\[[\d:]+<(?:[\d:]+|\?), +(?:[\d.]+|\?)(?:s/it|it/s)\]$")  # fmt: skip
BAR_FORMAT = ("{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, "
              "{rate_fmt}]\n")  # fmt: skip
FINAL = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:[A-Z]+ \d\d-\d\d [\d:]{8} \[[\w.]+:\d+\] )?"
                   r"(?P<type>[\w.]+(?:Error|Exception)): (?P<msg>.*)$")  # fmt: skip


def run_case(era: Era, argv: list[str], extra: dict[str, str], stop: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env |= {"GAMEDAY_VLLM_ERA": era.value, "GAMEDAY_TIME_SCALE": "1000"} | extra
    port = ["--host", "127.0.0.1", "--port", str(_free_port()), "--master-port"]
    port.append(str(_free_port()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "labengine", "serve", *argv, *port],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    out = ""
    for line in proc.stdout:
        out += line
        if stop is not None and stop in line:
            proc.send_signal(signal.SIGTERM)
            break
    try:
        rest, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
    return out + rest


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Printed:
    case: str
    kind: str  # INFO, WARNING, ERROR or "exception"
    where: str  # the lab engine's [file:line], or the exception's type
    text: str


def printed(case: str, out: str) -> list[Printed]:
    """The log records and exception messages in one run's output (traceback frames aside)."""
    found: list[Printed] = []
    lines = out.splitlines()
    for i, line in enumerate(lines):
        final = FINAL.match(line)
        if final and final["type"] != "pydantic_core._pydantic_core.ValidationError":
            found.append(Printed(case, "exception", final["type"], final["msg"]))
            continue
        bar = BAR.match(line)
        if bar:  # its description and the format it is printed in, both strings of vLLM's
            found.append(Printed(case, "progress", "tqdm desc", bar["desc"]))
            found.append(Printed(case, "progress", "tqdm bar_format", BAR_FORMAT))
            continue
        rec = RECORD.match(line)
        if rec and not _traceback_line(rec["msg"]):
            found.append(Printed(case, rec["level"], rec["where"], rec["msg"]))
            continue
        body = re.sub(r"^\(\w+ pid=\d+\) ", "", line)
        if body.startswith("  Value error, "):  # pydantic: the message may span lines
            text = [body[len("  Value error, ") :]]
            for nxt in lines[i + 1 :]:
                if " [type=value_error" in text[-1]:
                    break
                text.append(re.sub(r"^\(\w+ pid=\d+\) ", "", nxt))
            msg = "\n".join(text).split(" [type=value_error", 1)[0]
            found.append(Printed(case, "exception", "ValidationError", msg))
    return found


def _traceback_line(msg: str) -> bool:
    return msg.startswith(("Traceback (most recent call last):", "  ")) or bool(FINAL.match(msg))


# ---- the comparison ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    case: str
    vllm: str
    lab: str
    equal: bool


def match(p: Printed, found: list[Template]) -> Template | None:
    if p.kind == "progress":  # a bar's description and format are whole strings, not templates
        return next((t for t in found if t.level is None and t.text == p.text), None)
    levels = LOG_LEVELS.get(p.kind)
    for t in found:
        if levels is not None and t.level not in levels:
            continue
        if t.literal in p.text and t.pattern.fullmatch(p.text):
            return t
    return None


def message_rows(era: Era, found: list[Template]) -> list[Row]:
    rows: list[Row] = []
    seen: set[tuple[str, str]] = set()
    for case, argv, extra, stop in CASES:
        for p in printed(case, run_case(era, argv, extra, stop)):
            key = (p.kind, re.sub(r"\d+", "N", p.text))
            if key in seen:
                continue
            seen.add(key)
            t = match(p, found)
            lab = f"{p.kind} [{p.where}] {_short(p.text)}"
            rows.append(Row(f"message ({p.case})", t.where if t else "-", lab, t is not None))
            if p.kind in LOG_LEVELS:
                calls = location_candidates(p, found)
                rows.append(
                    Row(
                        f"location ({p.case})",
                        ", ".join(c.where for c in calls) or "-",
                        f"[{p.where}] {_short(p.text)[:50]}",
                        located(p.where, calls),
                    )
                )
    return rows


def location_candidates(p: Printed, found: list[Template]) -> list[Template]:
    """The wheel's logger calls that print this record's message at its level."""
    levels = LOG_LEVELS[p.kind]
    return [
        t
        for t in found
        if t.level in levels and t.literal in p.text and t.pattern.fullmatch(p.text)
    ]


def located(where: str, calls: list[Template]) -> bool:
    """`where` (basename:line, as the log shows it) is the place of one of `calls`."""
    return any(Path(c.where).name == where for c in calls)


# ---- traceback frames -----------------------------------------------------------------------

PACKAGE = "/vllm/"  # a frame in vLLM's own package: `.../dist-packages/vllm/...`


def in_wheel(frame: Frame) -> str | None:
    """The frame's path inside the wheel (`vllm/...`), None for a file outside the package."""
    if PACKAGE not in frame.file:
        return None
    return "vllm/" + frame.file.split(PACKAGE, 1)[1]


def frame_difference(tree: Path, frame: Frame) -> str | None:
    """None when the frame is the wheel's: the file exists, line N holds the frame's code
    (stripped) and lies inside the named function; otherwise what differs."""
    rel = in_wheel(frame)
    if rel is None:
        return "outside the vllm package"
    path = tree.parent / rel
    if not path.is_file():
        return f"{rel}: no such file in the wheel"
    source = path.read_text("utf-8")
    lines = source.splitlines()
    if not 1 <= frame.line <= len(lines):
        return f"{rel} has {len(lines)} lines, not {frame.line}"
    if lines[frame.line - 1].strip() != frame.code:
        return f"line {frame.line} holds {_short(lines[frame.line - 1].strip())!r}"
    spans = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse(source))
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == frame.function
        )
        or (isinstance(node, ast.Lambda) and frame.function == "<lambda>")
    ]
    if not any(a <= frame.line <= b for a, b in spans):
        return f"line {frame.line} is not inside a function {frame.function}"
    return None


def call_target(frames: list[Frame], i: int) -> str | None:
    """The function frame i's statement calls to reach frame i+1 (None for the last frame):
    through a wrapper (otel's, contextlib's) the function the wrapper runs; `func` for the
    wrapper itself; `run` for `uvloop.run(...)`."""
    f = frames[i]
    if (in_wheel(f), f.function) in WRAPPERS:
        return "func"
    if i + 1 >= len(frames):
        return None
    nxt = frames[i + 1]
    passing = nxt.function in ("__aenter__", "__enter__", "__exit__", "__aexit__")
    if (in_wheel(nxt), nxt.function) in WRAPPERS or passing:
        after = (
            g
            for g in frames[i + 2 :]
            if in_wheel(g) is not None and (in_wheel(g), g.function) not in WRAPPERS
        )
        return next((g.function for g in after), None)
    return nxt.function


def traceback_rows(era: Era, tree: Path) -> tuple[list[Row], int]:
    """A row per frame in the wheel; the number of frames outside it (not checked)."""
    rows: list[Row] = []
    outside = 0
    for which, frames in era_tracebacks(era).items():
        for i, f in enumerate(frames):
            if in_wheel(f) is None:
                outside += 1
                continue
            diff = frame_difference(tree, f)
            gap = which.value in NOT_REBUILT and i + 1 < len(frames)
            if diff is None and not gap:  # a frame above a gap has no known call to underline
                want = expected_carets(tree, f, call_target(frames, i))
                if want is None:
                    diff = f"line {f.line}: no call of {call_target(frames, i)} to underline"
                elif want != f.carets:
                    diff = f"carets {want.strip() or 'none'!r}, not {f.carets.strip() or 'none'!r}"
            lab = f"{in_wheel(f)}:{f.line} in {f.function}"
            rows.append(Row(f"frame ({which.value})", diff or lab, lab, diff is None))
    return rows, outside


# ---- traceback chains ---------------------------------------------------------------------------

# frames that pass a call on to the function they wrap: otel's `instrument` decorator
WRAPPERS = {("vllm/tracing/otel.py", "sync_wrapper"), ("vllm/tracing/otel.py", "async_wrapper")}
# what a context-manager decorator puts between the `with` and the generator: contextlib's
# __enter__ (or __exit__, when the generator raises after its `yield`)
CONTEXT_FRAMES = {
    "asynccontextmanager": ("__aenter__", "__aexit__"),
    "contextmanager": ("__enter__", "__exit__"),
}
# calls through a name bound elsewhere: vLLM's CLI subcommands (`args.dispatch_function(args)`
# is the subcommand's `cmd`), envs.py's table of getters (`environment_variables[name]()`), and
# the engine core's utility calls: _invoke_utility_method's `get_result()` is the lambda
# _handle_client_request builds, whose `method(...)` is `getattr(self, method_name)`, and the
# executor's run_method calls `func = getattr(obj, method)` on the worker
DISPATCH = {
    "args.dispatch_function": "cmd",
    "environment_variables[]": "*",
    "get_result": "<lambda>",
    "method": "*",
    "func": "*",
}
# tracebacks whose chain below the engine core's busy loop is not rebuilt from the source, and
# why: their frames are named here and reported, not counted as skipped links
NOT_REBUILT = {
    "busy_loop_rpc_timeout": "the executor's get_response raises it into a Future that the "
    "busy loop's step re-raises through concurrent.futures (stdlib frames), after the cause it "
    "chains (the message queue's own TimeoutError); the two ends are checked",
    "busy_loop_nccl": "the failing all-reduce runs in a TP worker process: the engine core "
    "sees it through the executor's collective_rpc, and the worker's own frames run through "
    "the model's forward (torch.nn.Module call frames, torch.compile's generated code), "
    "which depend on the model and the compilation mode",
    "busy_loop_deepgemm": "the kernel is reached from the busy loop through the scheduler "
    "step, the executor, the worker, the model runner and the model's forward (torch frames, "
    "torch.compile's generated code, CUDA graph capture), which depend on the model and the "
    "compilation mode",
    "busy_loop_triton": "as busy_loop_deepgemm: the Triton launch lies under the model's "
    "forward, whose frames depend on the model and the compilation mode",
    "busy_loop_cuda_sync": "the model runner's sync of the sampled tokens is reached from the "
    "busy loop through the scheduler step, the executor and the worker, whose frames depend on "
    "the executor backend and on async scheduling (the output's get_output or the runner's own "
    "sample_tokens)",
}
# signal handlers: they run on top of whatever Python frame is executing when the signal lands
SIGNAL_HANDLERS = {"signal_handler", "_interrupt_init"}
# a call that runs its argument in an event loop: the runner's frames come between
RUNNERS = {"uvloop.run": "uvloop/__init__.py", "asyncio.run": "asyncio/runners.py"}


def _module(tree: Path, rel: str) -> ast.Module:
    return ast.parse((tree.parent / rel).read_text("utf-8"))


def _statement(module: ast.Module, line: int) -> ast.stmt | None:
    """The innermost statement starting at `line` (a frame's line is where its statement starts)."""
    best: ast.stmt | None = None
    for node in ast.walk(module):
        if (
            isinstance(node, ast.stmt)
            and node.lineno == line
            and (best is None or (node.end_lineno or 0) <= (best.end_lineno or 0))
        ):
            best = node
    if best is None:  # the line lies inside a statement (a call's argument)
        for node in ast.walk(module):
            end = getattr(node, "end_lineno", None) or 0
            inside = isinstance(node, ast.stmt) and node.lineno <= line <= end
            if inside and (best is None or node.lineno >= best.lineno):
                best = node
    if isinstance(best, ast.With | ast.AsyncWith | ast.For | ast.AsyncFor | ast.If | ast.While):
        # a compound statement's frame line is its head: only the head's expressions count
        head = ast.Module(body=[], type_ignores=[])
        head.body = [ast.Expr(value=e) for e in _head(best)]
        return head  # type: ignore[return-value]
    return best


def _head(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.With | ast.AsyncWith):
        return [i.context_expr for i in node.items]
    if isinstance(node, ast.For | ast.AsyncFor):
        return [node.iter]
    if isinstance(node, ast.If | ast.While):
        return [node.test]
    return []


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{_dotted(node.func)}()"
    if isinstance(node, ast.Subscript):
        return f"{_dotted(node.value)}[]"
    return "?"


def _calls(stmt: ast.AST | None) -> set[str]:
    """The dotted names a statement calls, and `module.attr` reads (a module __getattr__)."""
    found: set[str] = set()
    for node in ast.walk(stmt) if stmt is not None else []:
        if isinstance(node, ast.Call):
            found.add(_dotted(node.func))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found.add(f"{node.value.id}.{node.attr}")
    return found


def _frame_statement(module: ast.Module, frame: Frame) -> ast.AST | None:
    """What a frame's line executes: the statement starting there, or, in a lambda's frame, the
    lambda's body (a lambda holds no statements; its call may start lines below the `lambda`)."""
    if frame.function == "<lambda>":
        return next(
            (
                n.body
                for n in ast.walk(module)
                if isinstance(n, ast.Lambda) and n.lineno <= frame.line <= (n.end_lineno or 0)
            ),
            None,
        )
    return _statement(module, frame.line)


def _reraises(module: ast.Module, f: Frame, g: Frame) -> bool:
    """f's line is `raise e` of an exception caught in the same function, and g is that
    function's frame where it was first raised: the re-raise keeps the exception's traceback."""
    stmt = _statement(module, f.line)
    return (
        isinstance(stmt, ast.Raise)
        and isinstance(stmt.exc, ast.Name)
        and (f.file, f.function) == (g.file, g.function)
        and g.line < f.line
    )


def _function(module: ast.Module, frame: Frame) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(module):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == frame.function
            and node.lineno <= frame.line <= (node.end_lineno or node.lineno)
        ):
            return node
    return None


def _decorators(fn: ast.FunctionDef | ast.AsyncFunctionDef | None) -> set[str]:
    names: set[str] = set()
    for d in fn.decorator_list if fn is not None else []:
        d = d.func if isinstance(d, ast.Call) else d
        names.add(_dotted(d).rsplit(".", 1)[-1])
    return names


def _reaches(calls: set[str], target: str) -> bool:
    """A call of the statement names `target`, the function of the next frame."""
    last = {c.rsplit(".", 1)[-1] for c in calls}
    if target in last or target in SIGNAL_HANDLERS:
        return True
    if any(DISPATCH.get(c) in (target, "*") for c in calls):
        return True
    if target == "__init__":  # a class called by name, `super().__init__`, an `x_class(...)`
        return any(c[:1].isupper() or c.lower().endswith(("class", "cls")) for c in last)
    if target == "__getattr__":  # a module's __getattr__: reading `envs.NAME`
        return any(c.startswith("envs.") for c in calls)
    return False


def chain_problems(tree: Path, frames: list[Frame]) -> list[tuple[str, str]]:
    """Each link between consecutive frames in vLLM's package, with what it skips ("" if none):
    frame i's statement must call frame j's function (by name, a constructor, a module
    __getattr__), and the frames between them must be the ones its decorators and event-loop
    runner put there (otel's sync_wrapper, contextlib's __aenter__, uvloop's and asyncio's)."""
    found: list[tuple[str, str]] = []
    inside = [i for i, f in enumerate(frames) if in_wheel(f) is not None]
    for a, b in itertools.pairwise(inside):
        f, g = frames[a], frames[b]
        between = frames[a + 1 : b]
        link = f"{_where(f)} -> {_where(g)}"
        f_rel, g_rel = in_wheel(f) or "", in_wheel(g) or ""
        g_module = _module(tree, g_rel)
        g_decorators = _decorators(_function(g_module, g))
        if (f_rel, f.function) in WRAPPERS:  # the wrapper calls the function it decorates
            ok = "instrument" in g_decorators
            found.append((link, "" if ok else f"{g.function} is not decorated by instrument"))
            continue
        f_module = _module(tree, f_rel)
        if _reraises(f_module, f, g):
            found.append((link, ""))
            continue
        calls = _calls(_frame_statement(f_module, f))
        target = g
        if (g_rel, g.function) in WRAPPERS:  # the call goes to the function after the wrapper
            nxt = next((frames[i] for i in inside if i > b), None)
            if nxt is None:
                found.append((link, "the wrapper is the last frame"))
                continue
            target = nxt
            g_decorators = _decorators(_function(_module(tree, in_wheel(nxt) or ""), nxt))
        problem = ""
        if not _reaches(calls, target.function):
            problem = f"line {f.line} calls none of {target.function}"
        elif "instrument" in g_decorators and target is g:
            problem = f"skips otel's sync_wrapper (before {g.function})"
        for deco, functions in CONTEXT_FRAMES.items():
            if deco in g_decorators and not any(
                h.file.endswith("contextlib.py") and h.function in functions for h in between
            ):
                problem = problem or f"skips contextlib's {functions[0]} (before {g.function})"
        for call, file in RUNNERS.items():
            if call in calls and not any(h.file.endswith(file) for h in between):
                problem = problem or f"skips {file}'s frames ({call})"
        found.append((link, problem))
    return found


def _node_for(stmt: ast.AST, line: int, target: str, calls_of: str) -> ast.expr | None:
    """The expression of the statement whose evaluation the next frame runs: an `await` of it,
    the call naming `target` (a constructor, a dispatch), or the `envs.NAME` read."""
    best: ast.expr | None = None
    for node in ast.walk(stmt):
        if not isinstance(node, ast.expr) or node.lineno != line:
            continue
        if isinstance(node, ast.Call) and _reaches({_dotted(node.func)}, target):
            if best is None or _inside(best, node):
                best = node
        elif (
            isinstance(node, ast.Attribute)
            and target == "__getattr__"
            and _dotted(node).startswith("envs.")
        ):
            best = node
    if best is not None and calls_of == "await":
        for node in ast.walk(stmt):
            if isinstance(node, ast.Await) and node.value is best:
                return node
    return best


def _inside(outer: ast.expr, inner: ast.expr) -> bool:
    return (outer.lineno, outer.col_offset) <= (inner.lineno, inner.col_offset) and (
        (inner.end_lineno or 0, inner.end_col_offset or 0)
        <= (outer.end_lineno or 0, outer.end_col_offset or 0)
    )


def expected_carets(tree: Path, frame: Frame, target: str | None) -> str | None:
    """The caret line Python 3.12 prints under a frame whose statement calls `target` (the next
    frame's function; None for the frame that raises), "" for none; None when the call cannot
    be found. Python 3.12 underlines the executing expression unless it spans the whole line
    (a multi-line expression counts to the line's end); BinOp and Subscript anchors do not
    occur in these frames."""
    rel = in_wheel(frame)
    if rel is None:
        return None
    module = _module(tree, rel)
    text = (tree.parent / rel).read_text("utf-8").splitlines()[frame.line - 1]
    if target is None or isinstance(_statement(module, frame.line), ast.Raise):
        return ""  # a `raise` statement (a re-raise too): the whole statement
    stmt = _frame_statement(module, frame)
    fn = _function(module, frame)
    awaited = "await" if isinstance(fn, ast.AsyncFunctionDef) else ""
    if isinstance(stmt, ast.Module):  # a compound statement's head (`async with x(...)`)
        awaited = ""
    node = _node_for(stmt, frame.line, target, awaited) if stmt is not None else None
    if node is None:
        return None
    lead = len(text) - len(text.lstrip())
    start = node.col_offset
    end = node.end_col_offset if node.end_lineno == frame.line else len(text.rstrip())
    if end is None or end - start >= len(text.strip()):
        return ""
    return " " * (start - lead) + "^" * (end - start)


def _where(f: Frame) -> str:
    return f"{(in_wheel(f) or f.file).rsplit('/', 1)[-1]}:{f.line} {f.function}"


def chain_rows(era: Era, tree: Path) -> list[Row]:
    rows: list[Row] = []
    for which, frames in era_tracebacks(era).items():
        if which.value == "process_bootstrap":
            continue  # its frames precede another traceback's: checked where they join
        for link, problem in chain_problems(tree, frames):
            if problem and which.value in NOT_REBUILT:
                problem = ""
                link += " (not rebuilt: see NOT_REBUILT)"
            rows.append(Row(f"chain ({which.value})", problem or link, link, not problem))
    return rows


def _short(text: str) -> str:
    # the cases bind free ports and time their start: the table shows `<port>` and `<t>`, so
    # that reruns compare equal
    text = re.sub(r"(127\.0\.0\.1:|'port': )\d+", r"\1<port>", text)
    text = re.sub(r"\btook \d+\.\d+ (s|seconds)\b", r"took <t> \1", text)
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return text if len(text) <= 110 else text[:107] + "..."


def env_rows(era: Era, tree: Path) -> list[Row]:
    theirs, ours = env_names(tree), known(era)
    rows = [
        Row(
            "env names (VLLM_* in envs.py)",
            f"{len(theirs)} names",
            f"{len(ours)} names",
            theirs == ours,
        )
    ]
    rows += [Row("env name", "-", n, False) for n in sorted(ours - theirs)]
    rows += [Row("env name", n, "-", False) for n in sorted(theirs - ours)]
    return rows


def flag_rows(era: Era, tree: Path) -> list[Row]:
    """The flags `vllm-lab serve` accepts. get_kwargs gives vLLM's bool fields argparse's
    BooleanOptionalAction, so `--no-X` exists wherever `--X` is a bool field's flag; such a
    lab flag counts as known when `--X` is one of vLLM's and the lab's is boolean too."""
    theirs = serve_flags(tree)
    parser = argparse.ArgumentParser(add_help=True)
    add_serve_arguments(parser, era)
    rows = []
    for action in parser._actions:
        for flag in action.option_strings:
            found = flag in theirs
            shown = flag
            if not found and flag.startswith("--no-"):
                positive = "--" + flag[len("--no-") :]
                found = positive in theirs and isinstance(action, argparse.BooleanOptionalAction)
                shown = f"{positive} (BooleanOptionalAction)"
            rows.append(Row("flag", shown if found else "-", flag, found))
    return rows


def report(wheel_dir: Path | None) -> tuple[str, int]:
    out = ["# The lab engine against vLLM's source", "", "Written by `make conformance`"
           " (bench/conformance.py); see its docstring for what is compared.", ""]  # fmt: skip
    differences = 0
    for era in Era:
        tree = source_tree(era, wheel_dir)
        frames, outside = traceback_rows(era, tree)
        chains = chain_rows(era, tree)
        rows = message_rows(era, templates(tree)) + frames + chains + env_rows(era, tree)
        rows += flag_rows(era, tree)
        bad = [r for r in rows if not r.equal]
        differences += len(bad)
        out += [f"## vLLM {era.version}: {len(rows)} cases, {len(bad)} differences", ""]
        skipped = sum(not r.equal for r in chains)
        out += [f"Traceback chains: {len(chains)} links between consecutive frames in the vllm "
                f"package, {skipped} skipped links. Not rebuilt from the source (the frames "
                "under the busy loop stay a gap, not counted as skipped):"]  # fmt: skip
        out += [f"- {k}: {v}" for k, v in NOT_REBUILT.items()] + [""]
        out += [f"{outside} traceback frames outside the vllm package (Python's standard library, "
                "uvloop, pydantic, triton, the console script) are not checked here; "
                "bench/differential.py compares the ones real runs reach.", ""]  # fmt: skip
        out += ["| case | vLLM | lab engine | equal |", "|---|---|---|---|"]
        out += [f"| {r.case} | {r.vllm} | {r.lab} | {'yes' if r.equal else 'NO'} |" for r in rows]
        out.append("")
    return "\n".join(out), differences


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--wheel-dir", type=Path, default=None, help="where vllm-<v>-*.whl are")
    ap.add_argument("--write", type=Path, default=None, help="also write the table here")
    args = ap.parse_args()
    text, differences = report(args.wheel_dir)
    sys.stdout.write(text + f"\n{differences} differences\n")
    if args.write:
        args.write.write_text(text + f"\n{differences} differences\n")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
