"""`gameday alerts test`: the DeepGEMM crash write-up's own check that alerts are delivered, not
just firing (a temporary `vector(1) > 0` rule through rule -> route -> receiver, then removed).
Exit codes: 0 the whole path works; 2 invalid input; 3 the lab is not up or has no monitoring;
4 rule not loaded; 5 not firing; 6 Alertmanager unreachable; 7 receiver not reached."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli import output
from runner.cli.options import handled, lab_option
from runner.errors import LabError, LabNotUp
from runner.labs import open_lab
from runner.labs.common.alertmanager_config import alertmanager_url, receiver_token
from runner.labs.registry import entry
from runner.run.receiver import WebhookReceiver, check_path
from runner.spec.inventory_load import load_inventory


@click.group()
def alerts() -> None:
    """Alert delivery: `gameday alerts test` checks that the lab's alerts reach a person.
    docs/alerts.md 'Alerts: delivered, not just firing'."""


@alerts.command("test")
@lab_option
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=20.0,
    show_default=True,
    help="Wall seconds each hop (loaded, firing, in Alertmanager, delivered) may take.",
)
@handled
def test(lab_path: Path, timeout_s: float) -> None:
    """Load a temporary `vector(1) > 0` rule into the lab's Prometheus (its rule file rewritten,
    then reloaded), see it fire, reach Alertmanager and be delivered to a webhook receiver this
    command serves; then remove the rule and check it is gone.

    Exit codes: 0 the whole path works; 2 invalid input; 3 the lab is not up, has no
    monitoring, or the rule could not be removed; 4 rule not loaded; 5 not firing;
    6 Alertmanager unreachable; 7 receiver not reached."""
    inventory = load_inventory(lab_path)
    mon = inventory.lab.monitoring
    if mon is None:
        raise LabError(f"{inventory.path}: this lab has no monitoring (gameday_lab.monitoring)")
    kind = entry(inventory.lab.kind)
    if kind.alertmanager_api is None:
        raise LabError(
            "gameday alerts test runs on the local and compose labs",
            hint="on Kubernetes the receiver must be reachable from the cluster: "
            "see docs/labs/kubernetes.md 'Which scenarios apply'",
        )
    lab = open_lab(inventory)
    if not lab.is_up():
        raise LabNotUp(f"the lab {inventory.lab.name} is not up", hint="gameday lab up")
    prom = lab.prometheus_url()
    if prom is None:
        raise LabError(f"{inventory.path}: this lab has no Prometheus")
    host, port = kind.receiver_listen(inventory)
    with WebhookReceiver(host, port, inventory.lab.name, receiver_token(lab.state_dir)) as receiver:
        got = check_path(
            lab.state_dir / "prometheus" / "rules.yml",
            prom,
            alertmanager_url(mon),
            receiver,
            timeout_s,
        )
    output.message(
        f"alert path works: rule loaded {got.rule_loaded_s:.2f} s, firing {got.firing_s:.2f} s, "
        f"in Alertmanager {got.in_alertmanager_s:.2f} s, delivered to {receiver.url} "
        f"{got.delivered_s:.2f} s after the reload; test rule removed"
    )
    output.message(f"  received: {got.delivered.evidence()}")
