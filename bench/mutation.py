"""gameday mutation check: do the unit tests of the pure-logic modules fail when the code is wrong?

    python bench/mutation.py [--module runner/spec/timing.py ...] [--workers 2] [--write FILE]
    [--list]

Each mutant changes one thing in one module: a comparison (`<` <-> `<=`, `==` <-> `!=`, `in` <->
`not in`, `is` <-> `is not`), an arithmetic or bitwise operator (`+` <-> `-`, `*` <-> `/`, `//`
-> `/`, ...), a boolean operator (`and` <-> `or`), a dropped `not` or unary minus, one constant
(a number + 1, a flipped bool, a string wrapped in `XX`), or one entry dropped from a list, tuple,
set or dict display. Docstrings, annotations and the literal text of f-strings (message wording)
are not mutated.

The mutated module is written into a private copy of the tree (one per worker, under a temporary
directory removed on exit, Ctrl-C included), so the working tree is never touched; the module's
own unit tests (MODULES below) run there with `pytest -x -q -p no:cacheprovider`. A mutant is
killed when the tests fail or exceed the per-mutant timeout. Mutants that change nothing
observable are listed in EQUIVALENT with the reason, and left out of the score.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from queue import Queue

ROOT = Path(__file__).resolve().parent.parent

# module -> the unit tests that speak for it
MODULES: dict[str, list[str]] = {
    "runner/spec/timing.py": ["tests/unit/runner/test_timing.py"],
    "runner/run/journal.py": ["tests/unit/runner/test_journal.py"],
    "runner/triage.py": ["tests/unit/runner/test_triage.py"],
    "runner/spec/signature.py": ["tests/unit/runner/test_signature.py"],
    "vllmfacts/memory.py": ["tests/unit/vllmfacts/test_memory.py"],
    "runner/results/redact.py": ["tests/unit/runner/test_redact.py"],
    "runner/cli/timestamps.py": ["tests/unit/runner/test_timestamps.py"],
}


@dataclass(frozen=True)
class Equivalent:
    """A mutant that changes nothing observable: matched by module, the changed line's source
    text (stripped) and the change."""

    module: str
    line: str
    change: str
    reason: str


EQUIVALENT: list[Equivalent] = [
    Equivalent(
        "runner/run/journal.py",
        'torn = f.read(1) != b"\\n"',
        "1 -> 2",
        "the read starts at the file's last byte, so asking for two bytes still returns one",
    ),
    Equivalent(
        "runner/run/journal.py",
        '"change": change.model_dump(mode="json"),',
        "'json' -> 'XXjsonXX'",
        "pydantic reads any other mode as 'python', and a Change holds only str enums, strings, "
        "tuples, dicts, bools and None, which json.dumps writes the same in either mode",
    ),
]

_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BINARY: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_BOOL: dict[type[ast.boolop], type[ast.boolop]] = {ast.And: ast.Or, ast.Or: ast.And}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitOr: "|",
    ast.BitAnd: "&",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.And: "and",
    ast.Or: "or",
}


@dataclass(frozen=True)
class Mutant:
    module: str
    node: int  # index of the node in ast.walk order of the parsed module
    kind: str  # compare | binary | augassign | bool | unary | constant | drop
    arg: int  # which operator of a comparison, which entry to drop
    line: int
    change: str
    source_line: str

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _mutated_constant(value: object) -> bool | int | float | str | None:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return f"XX{value}XX"
    return None


def _untouchable(tree: ast.AST) -> set[int]:
    """ids of nodes inside docstrings, annotations and f-string literal text."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            mark(node)
        elif isinstance(node, ast.arg):
            mark(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mark(node.returns)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            mark(node)
    return skip


def _candidates(node: ast.AST) -> Iterator[tuple[str, int, str]]:
    """(kind, arg, change) for each mutation of this one node."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            new = _COMPARE[type(op)]
            yield "compare", i, f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[new]}`"
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINARY:
        new_op = _BINARY[type(node.op)]
        kind = "binary" if isinstance(node, ast.BinOp) else "augassign"
        eq = "" if kind == "binary" else "="
        yield kind, 0, f"`{_SYMBOL[type(node.op)]}{eq}` -> `{_SYMBOL[new_op]}{eq}`"
    elif isinstance(node, ast.BoolOp):
        new_b = _BOOL[type(node.op)]
        yield "bool", 0, f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[new_b]}`"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        yield "unary", 0, "`not` dropped" if isinstance(node.op, ast.Not) else "`-` dropped"
    elif isinstance(node, ast.Constant):
        new_value = _mutated_constant(node.value)
        if new_value is not None:
            yield "constant", 0, f"{_short(node.value)} -> {_short(new_value)}"
    elif isinstance(node, ast.List | ast.Tuple | ast.Set) and not isinstance(
        getattr(node, "ctx", None), ast.Store
    ):
        if len(node.elts) >= (1 if isinstance(node, ast.List) else 2):
            for i, elt in enumerate(node.elts):
                yield "drop", i, f"entry {i} dropped ({_short(ast.unparse(elt))})"
    elif isinstance(node, ast.Dict) and len(node.keys) >= 1:
        for i, key in enumerate(node.keys):
            label = ast.unparse(key) if key is not None else "**"
            yield "drop", i, f"entry {_short(label)} dropped"


def mutants(module: str) -> list[Mutant]:
    source = (ROOT / module).read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    skip = _untouchable(tree)
    out = []
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skip:
            continue
        for kind, arg, change in _candidates(node):
            line = getattr(node, "lineno", 0)
            text = lines[line - 1].strip() if line else ""
            out.append(Mutant(module, index, kind, arg, line, change, text))
    return sorted(out, key=lambda m: (m.line, m.node, m.arg))


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list) and any(v is old for v in value):
                value[next(i for i, v in enumerate(value) if v is old)] = new
                return


def mutated_source(m: Mutant) -> str:
    tree = ast.parse((ROOT / m.module).read_text(encoding="utf-8"))
    node = list(ast.walk(tree))[m.node]
    if isinstance(node, ast.Compare) and m.kind == "compare":
        node.ops[m.arg] = _COMPARE[type(node.ops[m.arg])]()
    elif isinstance(node, ast.BinOp | ast.AugAssign):
        node.op = _BINARY[type(node.op)]()
    elif isinstance(node, ast.BoolOp):
        node.op = _BOOL[type(node.op)]()
    elif isinstance(node, ast.UnaryOp):
        _replace(tree, node, node.operand)
    elif isinstance(node, ast.Constant):
        node.value = _mutated_constant(node.value)
    elif isinstance(node, ast.List | ast.Tuple | ast.Set):
        del node.elts[m.arg]
    elif isinstance(node, ast.Dict):
        del node.keys[m.arg]
        del node.values[m.arg]
    else:
        raise ValueError(f"no mutation {m.kind} for {type(node).__name__}")
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def equivalent(m: Mutant) -> Equivalent | None:
    for e in EQUIVALENT:
        if e.module == m.module and e.change == m.change and e.line == m.source_line:
            return e
    return None


def _copy_tree(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "reports", "*.pyc")
    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    # the editable install points at ROOT: the copy must win, or no mutant would ever be run
    env = {**os.environ, "PYTHONPATH": str(dest)}
    probe = "import labengine, runner; print(runner.__file__); print(labengine.__file__)"
    got = subprocess.run(
        [sys.executable, "-c", probe], cwd=dest, env=env, capture_output=True, text=True
    ).stdout.split()
    if got != [str(dest / "runner" / "__init__.py"), str(dest / "labengine" / "__init__.py")]:
        raise SystemExit(f"the copy of the tree is not what Python imports: {got}")
    return dest


def _pytest(tree: Path, tests: list[str], timeout: float) -> tuple[bool, float]:
    """(tests passed, seconds); a timeout counts as a failure."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, time.monotonic() - start
    return proc.returncode == 0, time.monotonic() - start


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    killed: bool
    seconds: float


def _run_one(trees: Queue[Path], m: Mutant, timeout: float) -> Outcome:
    tree = trees.get()
    target = tree / m.module
    try:
        target.write_text(mutated_source(m), encoding="utf-8")
        passed, seconds = _pytest(tree, MODULES[m.module], timeout)
        return Outcome(m, not passed, seconds)
    finally:
        shutil.copy2(ROOT / m.module, target)
        trees.put(tree)


def run_module(module: str, trees: Queue[Path], workers: int) -> tuple[list[Outcome], float]:
    """Every non-equivalent mutant of the module, and the unmutated tests' time."""
    tree = trees.get()
    try:
        passed, baseline = _pytest(tree, MODULES[module], timeout=600)
    finally:
        trees.put(tree)
    if not passed:
        raise SystemExit(f"{module}: its tests fail without any mutation: {MODULES[module]}")
    timeout = max(10.0, 4 * baseline)
    todo = [m for m in mutants(module) if equivalent(m) is None]
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        outcomes = list(pool.map(lambda m: _run_one(trees, m, timeout), todo))
    finally:  # on Ctrl-C, the mutants not started yet are not started at all
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes, baseline


def _report(results: dict[str, tuple[list[Outcome], float]], seconds: float) -> str:
    out = ["# Mutation score of the pure-logic modules", ""]
    out += [
        "Written by `make mutation` (`bench/mutation.py`); what a mutant is, and how it is run, is",
        "in the script's docstring. Goal: at least 85 % killed in each module.",
        "",
        "| module | killed | total | score | equivalent (excluded) | tests' time |",
        "|---|---|---|---|---|---|",
    ]
    for module, (outcomes, baseline) in results.items():
        killed = sum(o.killed for o in outcomes)
        total = len(outcomes)
        score = 100 * killed / total if total else 100.0
        excluded = sum(e.module == module for e in EQUIVALENT)
        out.append(
            f"| `{module}` | {killed} | {total} | {score:.1f} % | {excluded} | {baseline:.1f} s |"
        )
    out += ["", f"Total time: {seconds:.0f} s.", "", "## Surviving mutants", ""]
    survivors = [o.mutant for outs, _ in results.values() for o in outs if not o.killed]
    out += [f"- `{m.where}` {m.change}: `{m.source_line}`" for m in survivors] or ["None."]
    out += ["", "## Equivalent mutants (excluded from the score)", ""]
    out += [f"- `{e.module}` {e.change} in `{e.line}`: {e.reason}" for e in EQUIVALENT] or ["None."]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", choices=sorted(MODULES), help="repeatable")
    ap.add_argument("--workers", type=int, default=2, help="at most 2 on a shared 2-core host")
    ap.add_argument("--write", type=Path, help="also write the report to this file")
    ap.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    args = ap.parse_args()
    modules = args.module or list(MODULES)
    if args.list:
        for module in modules:
            for m in mutants(module):
                mark = " (equivalent)" if equivalent(m) else ""
                print(f"{m.where} {m.change}{mark}: {m.source_line}")
        return 0
    workers = max(1, min(args.workers, 2))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gameday-mutation-") as tmp:
        trees: Queue[Path] = Queue()
        for i in range(workers):
            trees.put(_copy_tree(Path(tmp) / f"tree{i}"))
        results = {}
        for module in modules:
            results[module] = run_module(module, trees, workers)
            outs = results[module][0]
            print(f"{module}: {sum(o.killed for o in outs)}/{len(outs)} killed", file=sys.stderr)
    report = _report(results, time.monotonic() - start)
    print(report, end="")
    if args.write:
        args.write.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the copies of the tree are gone by now; the tree was never touched
        print("interrupted", file=sys.stderr)
        sys.exit(130)
