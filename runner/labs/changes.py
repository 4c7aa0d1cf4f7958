"""What every lab driver shares beyond the protocol. Planning a change is the same on every lab:
read the subject's current state through the driver, build the Change record towards the wanted
one; drivers differ in how they read state (`config`, `current`) and apply it (`apply`). Also:
the inventory's addresses, and the check that an address can be listened on."""

from __future__ import annotations

import socket
from collections.abc import Sequence

from runner.errors import LabError
from runner.inventory import Inventory
from runner.labs.base import (
    AnyState,
    Change,
    ChangeKind,
    NodeConfig,
    ProcessState,
    RuntimeEvent,
    Value,
)
from runner.labs.servicelinks import cluster_ip, kubernetes_service_env


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


def subject(kind: ChangeKind, node: str, name: str) -> Change:
    """A template naming what a change is about, to read its current state or build a change
    towards a new one (before/after are placeholders)."""
    blank = Value(value="")
    return Change(kind=kind, node=node, subject=name, before=blank, after=blank)


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


class ChangePlanning:
    """Mixin for lab drivers: the Change records of the actions a scenario can take."""

    inventory: Inventory
    label = "lab"  # how reports name the lab in emulation notes ("local lab", "compose lab")

    def config(self, node: str) -> NodeConfig:
        raise NotImplementedError

    def current(self, change: Change) -> AnyState:
        raise NotImplementedError

    def _command(self, command: Sequence[str]) -> tuple[str, ...]:
        """The command line a started program runs as on this lab."""
        return tuple(command)

    def _via(self, kind: ChangeKind) -> str:
        """How this lab applies a change of that kind, for its note (empty: directly)."""
        return ""

    def _note(self, kind: ChangeKind, text: str) -> str:
        via = self._via(kind)
        return f"{text} ({via})" if via else text

    def baseline_config(self, node: str) -> NodeConfig:
        n = self.inventory.node(node)
        return NodeConfig(args=tuple(n.rendered_args()), env=dict(n.env))

    def start_process(self, node: str, name: str, command: Sequence[str]) -> Change:
        probe = subject(ChangeKind.PROCESS, node, name)
        return probe.towards(
            ProcessState(running=True, command=self._command(command)),
            self.current(probe),
            self._note(ChangeKind.PROCESS, f"start {name} on {node}"),
        )

    def stop_process(self, node: str, name: str) -> Change:
        probe = subject(ChangeKind.PROCESS, node, name)
        cur = self.current(probe)
        cmd = cur.command if isinstance(cur, ProcessState) else ()
        return probe.towards(
            ProcessState(running=False, command=cmd),
            cur,
            self._note(ChangeKind.PROCESS, f"stop {name} on {node}"),
        )

    def set_address(self, node: str, network: str, address: str) -> Change:
        probe = subject(ChangeKind.ADDRESS, node, network)
        return probe.towards(
            Value(value=address),
            self.current(probe),
            self._note(ChangeKind.ADDRESS, f"{node} gets a new {network} address {address}"),
        )

    def scrape_on(self, job: str, network: str) -> Change:
        if self.inventory.lab.monitoring is None:
            raise LabError("this lab has no monitoring (gameday_lab.monitoring)")
        probe = subject(ChangeKind.SCRAPE_TARGETS, "lab", job)
        return probe.towards(
            Value(value=network),
            self.current(probe),
            f"Prometheus scrapes {job} on the {network} network",
        )

    def settle(self) -> None:
        """Before an undo: let what an interrupted run left in flight finish (none by default)."""

    def monitoring_ready(self, timeout_s: float) -> None:
        """Block until the lab's Prometheus has scraped every target once (no monitoring: return).
        `up()` does not wait for it: Prometheus hands its first targets over only after 5 s of
        wall time, so only what reads or changes monitoring waits (a scenario's baseline,
        `lab up`)."""

    def runtime_events(self, node: str) -> tuple[str, list[RuntimeEvent]]:
        """What the runtime recorded about the node, titled (none by default)."""
        return "", []

    def service_links(self, node: str, service: str, port: int, enabled: bool) -> Change:
        """No Kubernetes here: inject (or remove) the variables the kubelet would inject for a
        Service named `service` when the pod has enableServiceLinks: true."""
        before = self.config(node)
        injected = kubernetes_service_env(service, cluster_ip(service), port)
        env = {k: v for k, v in before.env.items() if k not in injected}
        if enabled:
            env |= injected
        verb = "injected" if enabled else "removed"
        note = (
            f"{self.label} emulation: no Kubernetes here, so the lab {verb} the "
            f"{len(injected)} variables the kubelet injects for a Service named {service!r} "
            f"with enableServiceLinks: true ({', '.join(sorted(injected))})"
        )
        return Change(
            kind=ChangeKind.NODE_CONFIG,
            node=node,
            before=before,
            after=NodeConfig(args=before.args, env=env),
            note=note,
        )
