"""The inventory's addresses, and the check that an address can be listened on."""

from __future__ import annotations

import socket

from runner.errors import LabError
from runner.spec.inventory import Inventory


def ensure_free(host: str, port: int, what: str) -> None:
    """LabError (`what host:port: taken (reason)`) when nothing can listen there now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise LabError(
                f"{what} {host}:{port}, which is taken ({exc.strerror})",
                hint="another program uses that address: stop it (is another lab up?), or "
                "change the address in the inventory",
            ) from exc


def configured_addresses(inventory: Inventory) -> dict[str, dict[str, str]]:
    """The addresses the inventory gives each node on each network."""
    return {
        n.name: {
            k: v
            for k, v in (("management", n.management_address), ("overlay", n.overlay_address))
            if v
        }
        for n in inventory.nodes
    }
