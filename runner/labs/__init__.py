"""Lab drivers: one protocol (runner.labs.base.LabDriver), one native implementation per lab kind.

- local: engine nodes as local processes under a supervisor daemon (runner.labs.local)
"""

from __future__ import annotations

from runner.errors import LabError
from runner.inventory import Inventory
from runner.labs.base import LabDriver
from runner.scenario import LabKind


def open_lab(inventory: Inventory) -> LabDriver:
    if inventory.lab.kind is LabKind.LOCAL:
        from runner.labs.local.driver import LocalLab

        return LocalLab(inventory)
    raise LabError(
        f"{inventory.path}: lab kind {inventory.lab.kind.value!r} has no driver in this version",
        hint="use a local-lab inventory such as inventories/local.yaml",
    )


__all__ = ["LabDriver", "open_lab"]
