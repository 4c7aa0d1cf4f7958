from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests draw the same examples on every run, so that CI never fails on a case one run
# happened to find; exploring is bench/soak.py --fuzz's job (its figures are in bench/RESULTS.md).
settings.register_profile("gameday", derandomize=True, database=None)
settings.load_profile("gameday")


def pytest_configure(config: pytest.Config) -> None:
    """The tests see PATH as a new machine has it: without the directory of the interpreter that
    runs them (the project's .venv/bin, on PATH only when it is activated). Whatever the labs or
    the tests start of the project's own must be found through the interpreter, not on PATH."""
    if sys.prefix == sys.base_prefix:
        return  # not a virtual environment: its bin/ is a system directory, kept
    own = os.path.realpath(Path(sys.executable).parent)
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    os.environ["PATH"] = os.pathsep.join(d for d in keep if os.path.realpath(d) != own)


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _isolated_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test gets its own lab state directory: no test sees another's journal."""
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path_factory.mktemp("state")))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Which Kubernetes tests ran against the real API server and which against the stand-in,
    and why (the `kube_real` and `kube_standin(why)` marks)."""
    real, standin = [], []
    for reports in terminalreporter.stats.values():
        for r in reports:
            if getattr(r, "when", None) != "call" and not (
                getattr(r, "when", None) == "setup" and r.outcome != "passed"
            ):
                continue
            kw = getattr(r, "keywords", {})
            if "kube_real" in kw:
                real.append(f"{r.nodeid} ({r.outcome})")
            elif "kube_standin" in kw:
                standin.append(f"{r.nodeid} ({r.outcome}): {_STANDIN_WHY.get(r.nodeid, '')}")
    if not real and not standin:
        return
    terminalreporter.section("Kubernetes API server per test")
    for line in real:
        terminalreporter.write_line(f"real v1.20 + our kubelet: {line}")
    for line in standin:
        terminalreporter.write_line(f"stand-in (tests/kubeapi): {line}")


_STANDIN_WHY: dict[str, str] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("kube_standin")
        if mark is not None:
            _STANDIN_WHY[item.nodeid] = str(mark.args[0] if mark.args else mark.kwargs.get("why"))
