"""A first run as a new team has it: gameday's wheel built from this checkout, installed with pip
into a new virtualenv, then, in new empty folders and with nothing on PATH but the system's
programs, `gameday init` + `gameday run` (the example scenario, whose recovery is the team's
script, and two quick built-ins on the team's lab) and a `gameday run` with no configuration at
all (the local lab that ships in the package). Every file the runs read comes from `init` or
from the package: nothing is copied by hand.

pip takes the dependencies from the package index (its cache makes a second run fast); the
wheel itself is built from a copy of the sources, as setuptools writes build/ beside them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ROOT

pytestmark = pytest.mark.e2e
SYSTEM_PATH = "/usr/bin:/bin"  # prometheus and its exporters; no gameday, no vllm-lab
STARTER = [
    ".github/workflows/gameday.yml",
    "gameday.toml",
    "gameday/ci/gitlab-ci.yml",
    "gameday/lab.yaml",
    "gameday/scenarios/example-model-typo.yaml",
    "gameday/scripts/set-model.sh",
]
BUILTINS = ["tp-mismatch", "context-window-overflow"]


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def call(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{argv}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-4000:]}"
    return p.stdout


def latest_result(reports: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((reports / "latest" / "result.json").read_text())
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with gameday's wheel installed by pip, and nothing else of this checkout."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("runner", "labengine", "vllmfacts", "scenarios", "inventories"):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    t0 = time.monotonic()
    call(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp), str(src)],
        tmp,
        env,
        300,
    )
    [wheel] = tmp.glob("gameday-*.whl")
    call([sys.executable, "-m", "venv", str(tmp / "venv")], tmp, env, 120)
    python = tmp / "venv" / "bin" / "python"
    call([str(python), "-m", "pip", "install", "-q", str(wheel)], tmp, env, 600)
    print(f"\nwheel built and installed in {time.monotonic() - t0:.1f} s")
    # the installed package, not this checkout, answers
    where = call([str(python), "-c", "import runner; print(runner.__file__)"], tmp, env, 60)
    assert where.strip().startswith(str(tmp / "venv")), where
    return tmp / "venv"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """What a team's shell gives gameday, without this checkout: PATH holds no gameday and no
    vllm-lab, so every project program must come from the virtualenv's interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": SYSTEM_PATH, "GAMEDAY_STATE_DIR": str(tmp_path / "state")}
    for program in ("gameday", "vllm-lab"):
        assert shutil.which(program, path=SYSTEM_PATH) is None, program
    return env


def test_init_then_run_passes_the_example_and_builtins(
    venv: Path, env: dict[str, str], tmp_path: Path
) -> None:
    team = tmp_path / "team"
    team.mkdir()
    gameday = str(venv / "bin" / "gameday")
    t0 = time.monotonic()
    call([gameday, "init"], team, env, 60)
    assert files_in(team) == STARTER
    ids = ["example-model-typo", *BUILTINS]
    call([gameday, "run", *ids, "--junit", "gameday-junit.xml"], team, env, 600)
    print(f"\ninit + run of {len(ids)} scenarios in {time.monotonic() - t0:.1f} s")
    result = latest_result(team / "gameday-reports")
    assert result["lab"]["inventory"] == str(team / "gameday" / "lab.yaml")
    assert {s["id"]: s["verdict"] for s in result["scenarios"]} == dict.fromkeys(ids, "passed")
    [example] = [s for s in result["scenarios"] if s["id"] == "example-model-typo"]
    steps = [e["event"] for e in example["timeline"] if e["kind"] == "step"]
    assert "recover 1: command ../scripts/set-model.sh serving " in "\n".join(steps)
    assert "recover 1: command: exit 0" in steps
    assert (team / "gameday-junit.xml").is_file()
    # what the run left is reports only: every other file is init's
    left = [f for f in files_in(team) if not f.startswith("gameday-reports/")]
    assert left == sorted([*STARTER, "gameday-junit.xml"])


def test_run_without_any_configuration_uses_the_packaged_lab(
    venv: Path, env: dict[str, str], tmp_path: Path
) -> None:
    empty = tmp_path / "new"
    empty.mkdir()
    t0 = time.monotonic()
    call([str(venv / "bin" / "gameday"), "run", "tp-mismatch"], empty, env, 600)
    print(f"\nrun of tp-mismatch with no configuration in {time.monotonic() - t0:.1f} s")
    result = latest_result(empty / "reports")
    assert Path(result["lab"]["inventory"]).is_relative_to(venv)
    assert [(s["id"], s["verdict"]) for s in result["scenarios"]] == [("tp-mismatch", "passed")]
