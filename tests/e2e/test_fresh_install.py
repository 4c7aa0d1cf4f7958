"""A first run as a new team has it: gameday's wheel built from this checkout, installed with pip
into a new virtualenv, then, in new empty folders and with nothing on PATH but the system's
programs, `gameday init` + a plain `gameday run` (the example scenario, whose recovery is the
team's script, and the whole built-in catalogue on the team's lab, as the docs show), a `gameday
run` with no configuration at all (the local lab that ships in the package), and `gameday lab
build` of a compose lab whose inventory the team wrote (the image built from the installed
package: its Dockerfile and its own files, no sources). Every file the runs read comes from
`init`, the package or the team: nothing is copied by hand.

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

from tests.support.cli import ROOT, SHIPPED, docker_or_skip

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
# an image name of its own: the checkout's compose tests keep gameday-lab:latest
IMAGE = "gameday-fresh-install-lab"


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
    for name in (
        "runner",
        "labengine",
        "vllmfacts",
        "scenarios",
        "inventories",
        "compose",
        "playbooks",
    ):
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
    ids = ["example-model-typo", *SHIPPED]
    call([gameday, "run", "--junit", "gameday-junit.xml"], team, env, 1200)
    print(f"\ninit + run of {len(ids)} scenarios in {time.monotonic() - t0:.1f} s")
    result = latest_result(team / "gameday-reports")
    assert result["lab"]["inventory"] == str(team / "gameday" / "lab.yaml")
    # engine-core-death is about a node whose policy is on-failure: the local lab's serving
    # restarts always, so it is not on this lab (`gameday plan` says so); pd-kv-handshake needs
    # each engine's own network, which the local lab's nodes do not have (its lab_notes)
    assert {s["id"]: s["verdict"] for s in result["scenarios"]} == dict.fromkeys(ids, "passed") | {
        "engine-core-death": "skipped",
        "pd-kv-handshake": "skipped",
    }
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


def test_lab_build_from_the_installed_package(
    venv: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The team's compose inventory names no compose file, playbooks or Dockerfile: the packaged
    ones serve, and the image carries the installed gameday (its files, not this checkout's)."""
    client = docker_or_skip()
    team = tmp_path / "team"
    (team / "gameday").mkdir(parents=True)
    text = (ROOT / "inventories" / "compose.yaml").read_text()
    assert "file:" not in text and "playbooks:" not in text
    lab = "gameday/compose.yaml"
    (team / lab).write_text(text.replace("gameday-lab:latest", f"{IMAGE}:latest"))
    gameday = str(venv / "bin" / "gameday")
    env = env | {k: v for k, v in os.environ.items() if k.startswith("DOCKER_")}
    try:
        t0 = time.monotonic()
        call([gameday, "lab", "build", "--lab", lab], team, env, 1200)
        print(f"\nlab build from the installed package in {time.monotonic() - t0:.1f} s")
        image = client.images.get(f"{IMAGE}:latest")
        digest = image.labels["gameday.inputs"]
        assert f"{IMAGE}:{digest}" in image.tags
        # the image's gameday is the one installed in the virtualenv, byte for byte
        [site] = (venv / "lib").glob("python3*/site-packages")
        for name in ("runner/labs/compose/build.py", "labengine/cli.py", "runner/__init__.py"):
            cat = f"cat /opt/gameday/lib/python3*/site-packages/{name}"
            inside = client.containers.run(image.id, ["sh", "-c", cat], remove=True)
            assert inside.decode() == (site / name).read_text(), name
        meta = "import importlib.metadata as m; print(m.version('gameday'))"
        inside = client.containers.run(image.id, ["python3", "-c", meta], remove=True)
        here = call([str(venv / "bin" / "python"), "-c", meta], team, env, 60)
        assert inside.decode() == here
        # unchanged inputs: not rebuilt
        p = subprocess.run(
            [gameday, "lab", "build", "--lab", lab],
            cwd=team,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert p.returncode == 0, p.stderr
        assert "cached (inputs unchanged)" in p.stderr
        # the packaged compose file brings the lab up on that image
        t0 = time.monotonic()
        call([gameday, "lab", "up", "--lab", lab], team, env, 900)
        print(f"lab up in {time.monotonic() - t0:.1f} s")
        [serving] = client.containers.list(filters={"name": "gameday-compose-serving"})
        assert serving.image.id == image.id
        compose = serving.labels["com.docker.compose.project.config_files"].split(",")[0]
        assert Path(compose).resolve().is_relative_to(venv), compose
    finally:
        subprocess.run(
            [gameday, "lab", "down", "--lab", lab], cwd=team, env=env, timeout=600, check=False
        )
        for tag in [t for i in client.images.list(name=IMAGE) for t in i.tags]:
            client.images.remove(tag)
