"""`gameday watchdog --lab INV --group tp_group`: watch a group, restart it whole when it stops
serving, within a restart budget; give up and alert when the budget is spent.

The CLI layer: options, the JSON log on stdout (one line per decision), the metrics server, and
Ctrl-C / SIGTERM ending the watch (exit 0). The logic is in runner.watchdog.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import click

from runner.cli import output
from runner.cli.lab_edits import node_names
from runner.cli.options import handled, lab_option
from runner.errors import InputError, LabError, LabNotUp
from runner.labs import open_lab
from runner.labs.registry import entry
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory
from runner.watchdog.loop import Watchdog
from runner.watchdog.machine import Policy
from runner.watchdog.metrics import WatchMetrics


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, message (the decision's reason) and the
    watchdog's fields (group, state, decision, real_s)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
        }
        line |= getattr(record, "watch", {})
        line["reason"] = record.getMessage()
        return json.dumps(line)


@click.command("watchdog")
@lab_option
@click.option(
    "--group", required=True, help="The inventory group (or node) to watch, e.g. tp_group."
)
@click.option(
    "--probe-interval-s",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Real-world seconds between looks (inference probe).",
)
@click.option(
    "--suspect-after",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Failed looks in a row before a whole-group restart.",
)
@click.option(
    "--restart-budget",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Restarts allowed within --budget-window-s; then give up and alert.",
)
@click.option(
    "--budget-window-s",
    type=click.FloatRange(min=0, min_open=True),
    default=3600.0,
    show_default=True,
    help="Real-world seconds the restart budget counts over.",
)
@click.option(
    "--boot-stall-s",
    type=click.FloatRange(min=0, min_open=True),
    default=1200.0,
    show_default=True,
    help="A boot with no new log line and no node state change for this many real-world "
    "seconds has stalled. A boot that keeps moving is never cut short. vLLM fetches the "
    "weights silently: make it longer than the node takes to download the checkpoint.",
)
@click.option(
    "--metrics-addr",
    default="127.0.0.1",
    show_default=True,
    help="Address of the Prometheus /metrics server (loopback by default).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=9477,
    show_default=True,
    help="Port of the /metrics server (0: any free port, printed at start).",
)
@click.option(
    "--alert-url",
    default=None,
    metavar="URL",
    help="On giving up, POST the alert here (an Alertmanager's /api/v2/alerts, or any "
    "webhook taking JSON). Default: the lab's own Alertmanager, on a local or compose lab with "
    "monitoring; none elsewhere.",
)
@click.option(
    "--no-alert",
    is_flag=True,
    help="Send no alert on giving up (the error line and the metric remain).",
)
@handled
def watchdog(
    lab_path: Path,
    group: str,
    probe_interval_s: float,
    suspect_after: int,
    restart_budget: int,
    budget_window_s: float,
    boot_stall_s: float,
    metrics_addr: str,
    metrics_port: int,
    alert_url: str | None,
    no_alert: bool,
) -> None:
    """Watch a group of the lab and restart it whole when it stops serving.

    States: booting (ends when an inference request completes; fails only when the boot stops
    making progress), serving, suspect (failed looks), restarting (all of the group's nodes
    together, through the lab's driver), gave_up (the restart budget is spent: an error line,
    the metric, and the alert: to --alert-url, else to the lab's Alertmanager, which routes
    it like any other alert); no more restarts until the group serves
    again). Every decision is one JSON line on stdout. Durations are real-world seconds: on a lab
    with a time_scale they pass that many times faster. Runs until Ctrl-C or SIGTERM (exit 0).
    """
    if alert_url is not None and not alert_url.startswith(("http://", "https://")):
        raise InputError(f"--alert-url {alert_url!r} is not an http(s) URL")
    if alert_url is not None and no_alert:
        raise InputError("--alert-url and --no-alert exclude each other")
    inventory = load_inventory(lab_path)
    if alert_url is None and not no_alert:
        alert_url = lab_alertmanager(inventory)
    nodes = node_names(inventory, [group], groups=True)
    driver = open_lab(inventory)
    if not driver.is_up():
        raise LabNotUp(
            f"lab {inventory.lab.name!r} is not up", hint=f"gameday lab up --lab {lab_path}"
        )
    policy = Policy(
        probe_interval_s=probe_interval_s,
        suspect_after=suspect_after,
        restart_budget=restart_budget,
        budget_window_s=budget_window_s,
        boot_stall_s=boot_stall_s,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("gameday.watchdog")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    metrics = WatchMetrics(group)
    try:
        port = metrics.serve(metrics_addr, metrics_port)
    except OSError as exc:
        raise LabError(
            f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc.strerror or exc}",
            hint="choose another --metrics-port (0: any free port)",
        ) from None
    output.message(
        f"watching {group} ({', '.join(nodes)}) of lab {inventory.lab.name!r}; "
        f"metrics on http://{metrics_addr}:{port}/metrics; "
        + (f"on giving up, the alert goes to {alert_url}" if alert_url else "no alert on giving up")
    )
    dog = Watchdog(driver, str(lab_path), group, nodes, policy, metrics, alert_url)
    stop = threading.Event()
    try:
        dog.run(stop)
    except KeyboardInterrupt:
        output.message("watchdog stopped")


def lab_alertmanager(inventory: Inventory) -> str | None:
    """The alerts API of the lab's own Alertmanager, where the runner can reach it: the local
    and compose labs publish it on the host; a Kubernetes lab's is inside the cluster."""
    api = entry(inventory.lab.kind).alertmanager_api
    return None if api is None else api(inventory)
