"""Instances of a local lab for `gameday run --parallel`: instance k (1..N-1; 0 is the inventory as
written) has every loopback address 127.0.x.y as 127.k.x.y (all of 127/8 is the loopback
interface), so its nodes, exporters and Prometheus listen on the same ports without meeting; its
name (hence its state directory and journal) is `<name>-p<k>`. Each instance is an inventory file
of its own (in its state directory), so that what a run hands a team's steps (`GAMEDAY_LAB`) and
`gameday lab --lab` name that instance, never instance 0."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import yaml

from runner.errors import InputError
from runner.fsutil import private_dir, write_private
from runner.labs.common.helpers import state_root
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory

_IPV4 = re.compile(r"\b127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")


def check_instances(inventory: Inventory, n: int) -> None:
    """Refuse `n` instances of a lab whose addresses are not all loopback ones."""
    for node in inventory.nodes:
        for addr in (node.address, node.management_address, node.overlay_address):
            if addr and not ipaddress.ip_address(addr).is_loopback:
                raise InputError(
                    f"--parallel moves loopback addresses; host {node.name} has {addr}",
                    file=inventory.path,
                    field=f"{node.name}.gameday_address",
                )


def _move(value: Any, k: int) -> Any:
    """Every 127.0.x.y in a value (strings, lists, dicts, models' dumps) as 127.k.x.y: engine
    flags (`--master-addr 127.0.81.1`) and listen addresses carry them inside longer text."""
    if isinstance(value, str):
        return _IPV4.sub(lambda m: f"127.{k}.{m.group(2)}.{m.group(3)}", value)
    if isinstance(value, list | tuple):
        return type(value)(_move(v, k) for v in value)
    if isinstance(value, dict):
        return {key: _move(v, k) for key, v in value.items()}
    return value


def instance(inventory: Inventory, k: int) -> Inventory:
    """Instance k >= 1 of the local lab, written to `<its state dir>/inventory.yaml`: the
    inventory's file with every loopback address moved (host variables Ansible reads included)."""
    data = _move(yaml.safe_load(inventory.path.read_text(encoding="utf-8")), k)
    lab = data["all"]["vars"]["gameday_lab"]
    lab["name"] = f"{inventory.lab.name}-p{k}"
    mon = lab.get("monitoring")
    if isinstance(mon, dict) and inventory.lab.monitoring is not None:
        # a default the file leaves out is an address too (Alertmanager's and the receiver's
        # follow it)
        mon.setdefault("prometheus_listen", _move(inventory.lab.monitoring.prometheus_listen, k))
    if "engine_command" in lab:  # as loaded: a relative program is the original file's
        lab["engine_command"] = _move(list(inventory.lab.engine_command), k)
    if inventory.lab.state_dir:
        lab["state_dir"] = f"{inventory.lab.state_dir}-p{k}"
    state = private_dir(Path(lab.get("state_dir") or state_root() / lab["name"]))
    path = state / "inventory.yaml"
    write_private(  # the nodes' environments are in it: owner-only
        path,
        f"# instance {k} of {inventory.path} for `gameday run --parallel` (written by gameday)\n"
        + yaml.safe_dump(data, sort_keys=False),
    )
    return load_inventory(path)
