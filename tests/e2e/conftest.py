from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import gameday


@pytest.fixture
def lab_down_after() -> Iterator[list[Path]]:
    """Inventories registered here are taken down after the test, whatever happened."""
    invs: list[Path] = []
    yield invs
    for inv in invs:
        gameday("lab", "down", "--lab", str(inv), timeout=60)
