"""`gameday lab down` on the compose lab removes only what carries the lab's own label: a Compose
project that holds anything else is refused (exit 3), and nothing is removed."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, gameday, variant
from tests.e2e.test_compose_lab import docker_or_skip

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


def lab_inventory(tmp_path: Path, project: str) -> Path:
    return variant(
        ROOT / "inventories" / "compose.yaml",
        tmp_path,
        {
            "name: compose": "name: owncheck",
            "project: gameday-compose": f"project: {project}",
            "../compose/compose.yaml": str(ROOT / "compose" / "compose.yaml"),
            "../playbooks": str(ROOT / "playbooks"),
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
