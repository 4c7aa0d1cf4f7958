"""The layout docs/architecture.md describes, held: a small runner root, one job per folder,
no two modules of one name, the vLLM facts shared rather than borrowed from the stand-in, the
lab kind switched on only where it is registered, and no import cycle."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runner", "labengine", "vllmfacts")
KIND_FOLDERS = ("local", "compose", "kubernetes")


def _modules(pkg: str) -> dict[str, Path]:
    out = {}
    for f in sorted((ROOT / pkg).rglob("*.py")):
        name = ".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        out[name] = f
    return out


def _imports(tree: ast.Module) -> Iterator[tuple[str, list[str]]]:
    """Every import the module runs (at its top or in a function), not those only a type
    checker reads (`if TYPE_CHECKING:`)."""

    def walk(node: ast.AST) -> Iterator[ast.AST]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (n for s in child.orelse for n in [s, *walk(s)])
                continue
            yield child
            yield from walk(child)

    for n in walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            yield n.module, [a.name for a in n.names]
        elif isinstance(n, ast.Import):
            for a in n.names:
                yield a.name, []


def _graph() -> dict[str, set[str]]:
    mods = {m: f for pkg in PACKAGES for m, f in _modules(pkg).items()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for module, names in _imports(ast.parse(f.read_text(encoding="utf-8"))):
            subs = {f"{module}.{n}" for n in names} & mods.keys()
            targets = subs | ({module} if len(subs) < len(names) or not names else set())
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def test_the_runner_root_holds_a_handful_of_modules() -> None:
    root = sorted(p.name for p in (ROOT / "runner").glob("*.py"))
    assert len(root) <= 8, root


def test_no_two_runner_modules_share_a_name_but_the_kinds_mirrors() -> None:
    files = [p for p in (ROOT / "runner").rglob("*.py") if p.name not in ("__init__.py",)]
    counts = Counter(p.name for p in files)
    for name, n in counts.items():
        if n == 1:
            continue
        where = [p.parent.relative_to(ROOT).as_posix() for p in files if p.name == name]
        assert all(w in {f"runner/labs/{k}" for k in KIND_FOLDERS} for w in where), (name, where)


def test_vllm_facts_are_shared_not_borrowed_from_the_stand_in() -> None:
    graph = _graph()
    for m, targets in graph.items():
        tops = {t.split(".")[0] for t in targets}
        if m.startswith("runner"):
            assert "labengine" not in tops, m
        elif m.startswith("labengine"):
            assert "runner" not in tops, m
        else:
            assert not tops & {"runner", "labengine"}, m


def test_the_lab_kind_is_switched_on_only_where_it_is_registered() -> None:
    allowed = {"runner/labs/registry.py", "runner/spec/kinds.py"}
    members = ("LOCAL", "COMPOSE", "KUBERNETES")
    found = []
    for f in (ROOT / "runner").rglob("*.py"):
        rel = f.relative_to(ROOT).as_posix()
        if rel in allowed or any(rel.startswith(f"runner/labs/{k}/") for k in KIND_FOLDERS):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in members
                and isinstance(node.value, ast.Name)
                and node.value.id == "LabKind"
            ):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_no_import_cycle_between_modules() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []
