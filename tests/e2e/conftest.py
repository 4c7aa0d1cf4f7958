from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import gameday


@pytest.fixture
def lab_down_after() -> Iterator[list[Path]]:
    """Inventories registered here are taken down after the test, whatever happened; each
    `lab down` must succeed."""
    invs: list[Path] = []
    yield invs
    failed = [
        f"`gameday lab down --lab {inv}` exited {p.returncode}: {p.stderr}"
        for inv in invs
        if (p := gameday("lab", "down", "--lab", str(inv), timeout=60)).returncode != 0
    ]
    assert failed == []


@pytest.fixture(scope="session")
def lab_image() -> str:
    """The compose lab's image, built (or found cached) by `gameday lab build`: a project the
    tests create themselves runs it, and a new machine has it only once something built it."""
    from tests.support.cli import ROOT, docker_or_skip

    docker_or_skip()
    p = gameday("lab", "build", "--lab", str(ROOT / "inventories" / "compose.yaml"), timeout=900)
    assert p.returncode == 0, p.stderr
    return "gameday-lab:latest"
