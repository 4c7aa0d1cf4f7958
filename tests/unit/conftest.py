"""Unit tests run in-process: starting a program or forking is refused here (in a test, and in
the fixtures it sets up), so that the unit suite stays fast and a test that needs a real
process lives in tests/integration/."""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from runner.run import context
from tests.support.stall import watch

WHERE = "unit tests start no process: a test that needs one belongs in tests/integration/"
PATCHES: list[tuple[Any, str]] = [
    (subprocess, "_fork_exec"),
    (_posixsubprocess, "fork_exec"),
    *((os, name) for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp")),
]


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError(WHERE)


@contextlib.contextmanager
def no_processes() -> Iterator[None]:
    saved = [(obj, name, getattr(obj, name)) for obj, name in PATCHES if hasattr(obj, name)]
    for obj, name, _ in saved:
        setattr(obj, name, _refuse)
    try:
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's verdicts here see a machine whose CPUs are never contended: the machine running
    the tests is often busy, and a window the load made inconclusive is tested where it is
    meant (tests/unit/runner/run/test_load.py)."""
    quiet = watch(0.0)
    monkeypatch.setattr(context, "process_watch", lambda: quiet)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with no_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with no_processes():
        return (yield)
