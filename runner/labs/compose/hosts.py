"""The compose lab's nodes as machines: each node's host container (or the engine container of
a one-container node) with its addresses on the lab's networks and the processes host actions
start there. Changes on them run as Ansible playbooks (runner.labs.compose.hostactions), so the
same playbooks work on real nodes over SSH."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.errors import LabError, LabNotUp
from runner.labs.base import ProcessState
from runner.labs.compose import hostactions
from runner.labs.compose.project import exec_in, playbooks_dir
from runner.spec.inventory import ComposeSpec, Inventory


class NodeHosts:
    """`host` is the driver's: a node's machine container (LabNotUp without one)."""

    def __init__(self, inventory: Inventory, spec: ComposeSpec, host: Callable[[str], Any]) -> None:
        self.inventory = inventory
        self.spec = spec
        self.playbooks = playbooks_dir(inventory, spec)
        self._host = host

    def network_name(self, role: str) -> str:
        key = self.spec.networks.get(role)
        if key is None:
            raise LabError(f"the compose lab has no {role} network (gameday_lab.compose.networks)")
        return f"{self.spec.project}-{key}"

    def addresses(self) -> dict[str, dict[str, str]]:
        """Each node's current address on each network, as Docker has it."""
        out: dict[str, dict[str, str]] = {}
        for n in self.inventory.nodes:
            try:
                nets = self._host(n.name).attrs["NetworkSettings"]["Networks"] or {}
            except LabNotUp:
                continue
            for role in self.spec.networks:
                if n.network_address(role) is None:
                    continue  # an address the inventory does not manage
                info = nets.get(self.network_name(role))
                if info and info.get("IPAddress"):
                    out.setdefault(n.name, {})[role] = info["IPAddress"]
        return out

    def process(self, node: str, name: str) -> ProcessState:
        """A host action's process on the node: running or not, and its command."""
        host = self._host(node)
        pidfile = f"{hostactions.RUN_DIR}/{name}.pid"
        rc, _ = exec_in(host, ["start-stop-daemon", "--status", "--pidfile", pidfile])
        rc_cmd, out = exec_in(host, ["cat", f"{hostactions.RUN_DIR}/{name}.cmd"])
        command: tuple[str, ...] = ()
        if rc_cmd == 0:
            with contextlib.suppress(ValueError):
                command = tuple(json.loads(out))
        return ProcessState(running=rc == 0, command=command)

    def strays(self) -> list[str]:
        """Processes running on the nodes that the lab did not start."""
        out = []
        for n in self.inventory.nodes:
            rc, listing = exec_in(self._host(n.name), ["ls", hostactions.RUN_DIR])
            for f in listing.split() if rc == 0 else []:
                if f.endswith(".pid") and self.process(n.name, f[:-4]).running:
                    out.append(f"{n.name}: process {f[:-4]} the lab did not start")
        return out

    def set_process(self, node: str, name: str, after: ProcessState, out: Path) -> None:
        self._run(
            "process.yaml",
            node,
            {
                "gameday_process": name,
                "gameday_state": "started" if after.running else "stopped",
                "gameday_command": list(after.command),
            },
            out,
        )

    def set_address(self, node: str, role: str, address: str, out: Path) -> None:
        self._run(
            "change-address.yaml",
            node,
            {"gameday_network": self.network_name(role), "gameday_new_address": address},
            out,
        )

    def _run(self, playbook: str, node: str, extravars: dict[str, Any], out: Path) -> None:
        """Run the playbook on the node; `out` keeps its Ansible events."""
        hostactions.run_playbook(
            self.inventory.path,
            self.playbooks / playbook,
            node,
            {"gameday_node": node, **extravars},
            out,
            self.inventory.lab.name,
        )
