"""`gameday lab down` on the compose lab removes only what carries the lab's own label: a Compose
project that holds anything else is refused (exit 3), and nothing is removed."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from runner.errors import LabError
from runner.labs.compose import project as compose_project
from runner.labs.compose.driver import ComposeLab
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, docker_or_skip, gameday, variant

pytestmark = pytest.mark.e2e
PROJECT = "com.docker.compose.project"


def tiny_image(client: Any) -> str:
    """An image of one file, imported offline: enough to create (not run) a container."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("README")
        data = b"a container that is not the lab's\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    name = "gameday-test-foreign:latest"
    client.api.import_image_from_data(buf.getvalue(), repository=name.split(":")[0], tag="latest")
    return name


def sleeper_image(client: Any) -> str:
    """An image of the host's own `sleep` and `timeout` and the libraries they load."""
    files = ["/bin/sleep", "/usr/bin/timeout"]
    libs = subprocess.run(["ldd", *files], capture_output=True, text=True, check=True).stdout
    files += sorted({w for w in libs.split() if w.startswith("/") and not w.endswith(":")})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in files:
            tar.add(os.path.realpath(f), arcname=f.lstrip("/"))
    name = "gameday-test-sleeper:latest"
    client.api.import_image_from_data(buf.getvalue(), repository=name.split(":")[0], tag="latest")
    return name


def lab_inventory(tmp_path: Path, project: str) -> Path:
    return variant(
        ROOT / "inventories" / "compose.yaml",
        tmp_path,
        {
            "name: compose": "name: owncheck",
            "project: gameday-compose": f"project: {project}",
        },
    )


def down(tmp_path: Path, inv: Path) -> Any:
    return gameday(
        "lab", "down", "--lab", str(inv), timeout=120, env={"GAMEDAY_STATE_DIR": str(tmp_path)}
    )


def test_lab_down_refuses_a_project_holding_what_is_not_the_labs(tmp_path: Path) -> None:
    client = docker_or_skip()
    project = f"gameday-owncheck-{os.getpid()}"
    theirs = client.containers.create(
        tiny_image(client), ["none"], name=f"{project}-theirs", labels={PROJECT: project}
    )
    vol = client.volumes.create(f"{project}_data")  # named as Compose names a project's volume
    try:
        p = down(tmp_path, lab_inventory(tmp_path, project))
        assert p.returncode == 3, p.stdout + p.stderr
        assert f"container {project}-theirs" in p.stderr and f"volume {project}_data" in p.stderr
        assert "nothing was removed" in p.stderr and "Traceback" not in p.stderr
        theirs.reload()  # both still there
        vol.reload()
    finally:
        theirs.remove(force=True)
        vol.remove(force=True)


def test_lab_down_removes_what_carries_the_labs_label(tmp_path: Path) -> None:
    client = docker_or_skip()
    project = f"gameday-owncheck-{os.getpid()}"
    ours = client.volumes.create(
        f"{project}_serving-gpu", labels={PROJECT: project, "gameday.lab": "owncheck"}
    )
    try:
        p = down(tmp_path, lab_inventory(tmp_path, project))
        assert p.returncode == 0, p.stdout + p.stderr
        assert not [v for v in client.volumes.list() if v.name == ours.name]
    finally:
        if [v for v in client.volumes.list() if v.name == ours.name]:
            ours.remove(force=True)


def test_an_exec_that_hangs_is_a_lab_error(monkeypatch: pytest.MonkeyPatch) -> None:
    client = docker_or_skip()
    box = client.containers.run(
        sleeper_image(client),
        ["/bin/sleep", "infinity"],
        detach=True,
        name=f"gameday-exec-{os.getpid()}",
    )
    try:
        lab = ComposeLab(load_inventory(ROOT / "inventories" / "compose.yaml"))
        assert lab._exec(box, ["sleep", "0.1"]) == (0, "")
        monkeypatch.setattr(compose_project, "EXEC_TIMEOUT_S", 2)
        t0 = time.monotonic()
        with pytest.raises(
            LabError, match=r"`sleep 60` in container gameday-exec-.* did not finish"
        ):
            lab._exec(box, ["sleep", "60"])
        assert time.monotonic() - t0 < 10
    finally:
        box.remove(force=True)
