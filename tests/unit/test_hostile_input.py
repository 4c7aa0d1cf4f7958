"""Hostile input to the loaders: malformed, truncated, deeply nested, huge and type-confused
scenario and inventory files. Never a traceback: always an InputError naming the file."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import InputError
from runner.inventory import load_inventory
from runner.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
INVENTORY = ROOT / "inventories" / "local.yaml"
FAST = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=30,
)


def load_any(path: Path, inventory: bool) -> None:
    try:
        (load_inventory if inventory else load_scenario)(path)
    except InputError as exc:
        assert str(path) in str(exc)  # the message names the file


@FAST
@given(text=st.text(max_size=2000))
def test_random_text(tmp_path_factory: Any, text: str) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    p.write_text(text)
    load_any(p, inventory=False)
    load_any(p, inventory=True)


@FAST
@given(data=json_like)
def test_random_structures(tmp_path_factory: Any, data: Any) -> None:
    p = tmp_path_factory.mktemp("fuzz") / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    load_any(p, inventory=False)
    load_any(p, inventory=True)


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [q for k, v in obj.items() for q in _leaves(v, (*path, k))] + [path]
    if isinstance(obj, list):
        return [q for i, v in enumerate(obj) for q in _leaves(v, (*path, i))] + [path]
    return [path]


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), value=json_like)
def test_type_confused_real_files(tmp_path_factory: Any, seed: int, value: Any) -> None:
    rnd = random.Random(seed)
    for src, inventory in [*((s, False) for s in SCENARIOS), (INVENTORY, True)]:
        data = yaml.safe_load(src.read_text())
        path = rnd.choice(_leaves(data))
        p = tmp_path_factory.mktemp("fuzz") / src.name
        p.write_text(yaml.safe_dump(_set(data, path, value)))
        load_any(p, inventory)


def test_every_truncation(tmp_path: Path) -> None:
    for src, inventory in [*((s, False) for s in SCENARIOS[:3]), (INVENTORY, True)]:
        text = src.read_text()
        for cut in range(0, len(text), max(1, len(text) // 120)):
            p = tmp_path / src.name
            p.write_text(text[:cut])
            load_any(p, inventory)


def test_deep_and_huge(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000)
    huge = tmp_path / "huge.yaml"
    huge.write_text("x: " + "y" * 2_000_000)
    bomb = tmp_path / "bomb.yaml"  # a billion laughs: aliases that expand exponentially
    bomb.write_text(
        "a: &a ['x','x','x','x','x','x','x','x','x']\n"
        + "".join(
            f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        )
    )
    for f in (deep, huge, bomb):
        for inventory in (False, True):
            load_any(f, inventory)
