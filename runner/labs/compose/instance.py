"""Instances of a compose lab for `gameday run --parallel`: instance k (1..N-1; 0 is the
inventory as written) is a separate Compose project `<project>-p<k>` (its containers
`<project>-p<k>-<service>`, its networks and volumes its own), each network's /24 moved up by k
times the number of networks (172.30.80/81 -> 172.30.82/83 for k = 1), each port published on the
loopback interface up by 100 k. Host actions are Ansible plays on a real inventory, so the
instance's inventory is written out, beside its state, and loaded from there."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from runner.errors import InputError
from runner.fsutil import write_private
from runner.labs.common.helpers import state_root
from runner.labs.compose.project import compose_file, playbooks_dir
from runner.spec.inventory import ComposeSpec, Inventory
from runner.spec.inventory_load import load_inventory

PORT_STEP = 100  # published ports of instance k are the inventory's + PORT_STEP * k


def _networks(spec: ComposeSpec) -> list[IPv4Network]:
    return [IPv4Network(s, strict=False) for s in spec.subnets.values()]


def check_instances(inventory: Inventory, n: int) -> None:
    """Refuse `n` instances whose networks would run past x.x.254.0/24."""
    spec = inventory.lab.compose or ComposeSpec()
    nets = _networks(spec)
    top = max(int(net.network_address.packed[2]) for net in nets)
    if top + len(nets) * (n - 1) > 254:
        raise InputError(
            f"--parallel {n} would move the compose lab's networks past x.x.254.0/24 "
            f"(each instance takes the next {len(nets)} /24s)",
            file=inventory.path,
            field="gameday_lab.compose.subnets",
            hint="use fewer instances, or lower /24s",
        )


class _Mover:
    """Moves one value of the inventory to instance k: an address on one of the lab's networks
    to the instance's network, a port published on the loopback interface up, a container name
    into the instance's project."""

    def __init__(self, spec: ComposeSpec, k: int) -> None:
        self.k = k
        self.project = spec.project
        step = 256 * len(spec.subnets) * k
        self.nets = {
            net: IPv4Network(f"{net.network_address + step}/{net.prefixlen}")
            for net in _networks(spec)
        }

    def network(self, net: IPv4Network) -> IPv4Network:
        return self.nets[net]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: self(v) for key, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, str):
            return value
        if value.startswith(f"{self.project}-"):  # a container name (ansible_host)
            return f"{self.project}-p{self.k}-{value.removeprefix(self.project + '-')}"
        if "://" in value:  # a URL (prometheus_url)
            url = urlsplit(value)
            netloc = self._endpoint(url.netloc)
            return value if netloc is None else urlunsplit(url._replace(netloc=netloc))
        moved = self._endpoint(value)
        return value if moved is None else moved

    def _endpoint(self, text: str) -> str | None:
        """`address` or `address:port` moved; None when the text is neither."""
        host, colon, port = text.rpartition(":")
        if not colon or not port.isdigit():
            host, port = text, ""
        try:
            addr = IPv4Address(host)
        except ValueError:
            return None
        for old, new in self.nets.items():
            if addr in old:
                addr = new.network_address + (int(addr) - int(old.network_address))
                break
        if not port:
            return str(addr)
        shift = PORT_STEP * self.k if addr.is_loopback else 0
        return f"{addr}:{int(port) + shift}"


def instance(inventory: Inventory, k: int) -> Inventory:
    """Instance k >= 1 of the compose lab, written to `<its state dir>/inventory.yaml`."""
    spec = inventory.lab.compose or ComposeSpec()
    move = _Mover(spec, k)
    data = move(yaml.safe_load(inventory.path.read_text()))
    lab = data["all"]["vars"]["gameday_lab"]
    lab["name"] = f"{inventory.lab.name}-p{k}"
    if inventory.lab.state_dir:
        lab["state_dir"] = f"{inventory.lab.state_dir}-p{k}"
    compose = lab.setdefault("compose", {})
    compose["project"] = f"{spec.project}-p{k}"
    compose["file"] = str(compose_file(inventory, spec))
    compose["playbooks"] = str(playbooks_dir(inventory, spec))
    compose["subnets"] = {
        role: str(move.network(IPv4Network(subnet, strict=False)))
        for role, subnet in spec.subnets.items()
    }
    state = Path(lab.get("state_dir") or state_root() / lab["name"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / "inventory.yaml"
    write_private(  # the nodes' environments are in it: owner-only
        path,
        f"# instance {k} of {inventory.path} for `gameday run --parallel` (written by gameday)\n"
        + yaml.safe_dump(data, sort_keys=False),
    )
    return load_inventory(path)
