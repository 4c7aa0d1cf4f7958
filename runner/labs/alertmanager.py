"""The lab's Alertmanager: its configuration (one route, to the webhook receiver the runner
serves) and where each lab kind has it and the receiver. Its group_wait, group_interval and
repeat_interval are Alertmanager's defaults (30 s, 5 min, 4 h) in lab time, like the rules'
`for:`."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import yaml

from runner.inventory import Inventory, Monitoring
from runner.scenario import LabKind

RECEIVER_NAME = "gameday-runner"
RECEIVER_PATH = "/alerts"
COMPOSE_RECEIVER_PORT = 9095
# Alertmanager's own defaults, real-world seconds
GROUP_WAIT_S = 30.0
GROUP_INTERVAL_S = 300.0
REPEAT_INTERVAL_S = 4 * 3600.0
# Prometheus's --rules.alert.resend-delay default, real-world seconds. Scaled too: an alert sent
# while Prometheus has not yet rediscovered its Alertmanager (a reload re-runs discovery) is
# dropped, and goes again only after this delay.
RESEND_DELAY_S = 60.0
DEBIAN_COMMAND = "prometheus-alertmanager"  # Debian's name for Alertmanager's binary


def _lab_ms(real_s: float, scale: float) -> str:
    return f"{max(int(real_s / scale * 1000), 1)}ms"


def resend_delay(inventory: Inventory) -> str:
    """Prometheus's --rules.alert.resend-delay in lab time."""
    return _lab_ms(RESEND_DELAY_S, inventory.lab.time_scale)


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host, int(port)


def local_program(mon: Monitoring) -> str:
    """The Alertmanager program of the local lab (and the compose image): Debian's."""
    return mon.alertmanager_command or DEBIAN_COMMAND


def alertmanager_listen(mon: Monitoring) -> str:
    """host:port Alertmanager listens on (local) or is published on (compose)."""
    if mon.alertmanager_listen:
        return mon.alertmanager_listen
    host, port = _host_port(mon.prometheus_listen)
    return f"{host}:{port + 3}"


def alertmanager_url(mon: Monitoring) -> str:
    """Where the runner reaches Alertmanager on the host (local, compose)."""
    return f"http://{alertmanager_listen(mon)}"


def receiver_listen(inventory: Inventory) -> tuple[str, int]:
    """Where the runner's webhook receiver listens: a loopback address for the local lab, the
    management network's gateway (the host's own address on the lab's bridge) for compose."""
    mon = inventory.lab.monitoring
    assert mon is not None
    if mon.receiver_listen:
        return _host_port(mon.receiver_listen)
    if inventory.lab.kind is LabKind.COMPOSE and inventory.lab.compose is not None:
        # compose.yaml gives each network the gateway x.x.x.254: the host's address on it
        subnet = IPv4Network(inventory.lab.compose.subnets["management"])
        return str(subnet.broadcast_address - 1), COMPOSE_RECEIVER_PORT
    host, port = _host_port(mon.prometheus_listen)
    return host, port + 5


def webhook_url(inventory: Inventory) -> str:
    host, port = receiver_listen(inventory)
    return f"http://{host}:{port}{RECEIVER_PATH}"


def alertmanager_config(inventory: Inventory, url: str | None = None) -> dict[str, Any]:
    """alertmanager.yml: every alert to the runner's webhook (`url`, default webhook_url)."""
    scale = inventory.lab.time_scale
    return {
        "route": {
            "receiver": RECEIVER_NAME,
            "group_by": ["alertname"],
            "group_wait": _lab_ms(GROUP_WAIT_S, scale),
            "group_interval": _lab_ms(GROUP_INTERVAL_S, scale),
            "repeat_interval": _lab_ms(REPEAT_INTERVAL_S, scale),
        },
        "receivers": [
            {
                "name": RECEIVER_NAME,
                "webhook_configs": [{"url": url or webhook_url(inventory), "send_resolved": True}],
            }
        ],
    }


def write_alertmanager(adir: Path, inventory: Inventory, url: str | None = None) -> Path:
    """Write alertmanager.yml into `adir` (atomically); its path."""
    adir.mkdir(parents=True, exist_ok=True)
    tmp = adir / "alertmanager.yml.tmp"
    tmp.write_text(yaml.safe_dump(alertmanager_config(inventory, url), sort_keys=False))
    tmp.replace(adir / "alertmanager.yml")
    return adir / "alertmanager.yml"


def prometheus_alerting(target: str) -> dict[str, Any]:
    """Prometheus's `alerting:` section: its alerts to the Alertmanager at `target` (host:port
    as Prometheus reaches it)."""
    return {"alertmanagers": [{"static_configs": [{"targets": [target]}]}]}


def local_command(inventory: Inventory, adir: Path, program: str) -> list[str]:
    """The local lab's Alertmanager command line: loopback only, no cluster port."""
    mon = inventory.lab.monitoring
    assert mon is not None
    return [
        program,
        f"--config.file={adir / 'alertmanager.yml'}",
        f"--storage.path={adir / 'data'}",
        f"--web.listen-address={alertmanager_listen(mon)}",
        "--cluster.listen-address=",
        "--log.level=warn",
    ]
