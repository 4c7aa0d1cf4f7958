"""The lab's Alertmanager: its configuration (one route, to the webhook receiver the runner
serves) and where it and the receiver are unless a lab kind says otherwise (the registry's
`receiver_listen`). Its group_wait, group_interval and
repeat_interval are Alertmanager's defaults (30 s, 5 min, 4 h) in lab time, like the rules'
`for:`.

The receiver listens where others reach it too (any local process; on compose, every container
on the lab's bridge): a forged firing alert would fake a time to detect. So the Alertmanager
gameday configures sends a secret of the lab's (`receiver_token`, owner-only in the lab's state
directory) as a bearer token (webhook_config's http_config.authorization, which Alertmanager has
had since 0.22), and the receiver refuses a POST without it."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any

import yaml

from runner.fsutil import fsync_dir, private_dir
from runner.spec.inventory import Inventory, Monitoring

RECEIVER_NAME = "gameday-runner"
RECEIVER_PATH = "/alerts"
TOKEN_FILE = "receiver-token"  # in the lab's state directory, 0600
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


def receiver_given(inventory: Inventory) -> tuple[str, int] | None:
    """The receiver address the inventory gives (monitoring.receiver_listen), if any."""
    mon = inventory.lab.monitoring
    assert mon is not None
    return _host_port(mon.receiver_listen) if mon.receiver_listen else None


def receiver_listen(inventory: Inventory) -> tuple[str, int]:
    """Where the runner's webhook receiver listens: the inventory's address, else beside the
    lab's Prometheus (its port + 5; a loopback address on the local lab)."""
    mon = inventory.lab.monitoring
    assert mon is not None
    given = receiver_given(inventory)
    if given is not None:
        return given
    host, port = _host_port(mon.prometheus_listen)
    return host, port + 5


def webhook_url(listen: tuple[str, int]) -> str:
    host, port = listen
    return f"http://{host}:{port}{RECEIVER_PATH}"


def receiver_token(folder: Path, *, create: bool = False) -> str | None:
    """The receiver secret of the lab whose state directory is `folder`; with `create`, one is
    made when the lab has none (lab up, as it writes alertmanager.yml). None: the lab's
    Alertmanager sends none (a lab brought up before it had one, or an Alertmanager gameday
    does not configure), so the receiver asks for none."""
    path = folder / TOKEN_FILE
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(encoding="utf-8").strip() or None
    if not create:
        return None
    private_dir(folder)
    tmp = folder / f".{TOKEN_FILE}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(secrets.token_urlsafe(32))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)  # the first of two racing `lab up`s wins; the other reads its token
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    fsync_dir(folder)
    return path.read_text(encoding="utf-8").strip()


def alerts_api(inventory: Inventory) -> str | None:
    """The alerts API of the lab's Alertmanager where the host publishes it (local, compose)."""
    mon = inventory.lab.monitoring
    return None if mon is None else f"{alertmanager_url(mon)}/api/v2/alerts"


def alertmanager_config(
    inventory: Inventory,
    url: str,
    token: str | None = None,
    *,
    token_file: str | None = None,
) -> dict[str, Any]:
    """alertmanager.yml: every alert to the runner's webhook at `url`, with `token` as its
    bearer token when given, or the token Alertmanager reads from `token_file` (a mounted
    Secret: the ConfigMap, which `lab manifests` prints, then holds no secret)."""
    scale = inventory.lab.time_scale
    webhook: dict[str, Any] = {"url": url, "send_resolved": True}
    if token is not None:
        webhook["http_config"] = {"authorization": {"type": "Bearer", "credentials": token}}
    elif token_file is not None:
        webhook["http_config"] = {
            "authorization": {"type": "Bearer", "credentials_file": token_file}
        }
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
                "webhook_configs": [webhook],
            }
        ],
    }


def write_alertmanager(adir: Path, inventory: Inventory, url: str) -> Path:
    """Write alertmanager.yml into `adir` (atomically; `adir` is in the lab's state directory),
    its webhook `url` with the lab's receiver token (made now if the lab has none); its path."""
    adir.mkdir(parents=True, exist_ok=True)
    tmp = adir / "alertmanager.yml.tmp"
    config = alertmanager_config(inventory, url, receiver_token(adir.parent, create=True))
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
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
