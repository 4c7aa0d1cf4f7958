"""The inventory's addresses, and the check that an address can be listened on."""

from __future__ import annotations

import errno
import socket

from runner.errors import LabError
from runner.spec.inventory import Inventory


def ensure_free(host: str, port: int, what: str) -> None:
    """LabError when nothing can listen at host:port now, saying what the OS said: the address
    is taken (EADDRINUSE), is not an address (a name that does not resolve), is not one of this
    machine's (EADDRNOTAVAIL), or anything else in the OS's own words; never one for another."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except socket.gaierror as exc:
            raise LabError(
                f"{what} {host}:{port}: {host!r} is not an address ({exc.strerror})",
                hint="give an IP address, or a host name this machine resolves, in the inventory",
            ) from exc
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise LabError(
                    f"{what} {host}:{port}, which is taken ({exc.strerror})",
                    hint="another program uses that address: stop it (is another lab up?), or "
                    "change the address in the inventory",
                ) from exc
            if exc.errno == errno.EADDRNOTAVAIL:
                raise LabError(
                    f"{what} {host}:{port}: {host} is not an address of this machine "
                    f"({exc.strerror})",
                    hint="give one of this machine's addresses (any of 127.0.0.0/8 is)",
                ) from exc
            raise LabError(f"{what} {host}:{port}: {exc.strerror or exc}") from exc


def resolution_error(host: str) -> str | None:
    """Why this machine cannot resolve `host` to an address (None: it can, or it is one)."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return str(exc.strerror)
    except UnicodeError as exc:
        return str(exc)
    return None


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
