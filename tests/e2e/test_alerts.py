"""`gameday alerts test` on the local lab: the whole path (rule -> Prometheus -> Alertmanager ->
the runner's receiver) works on a healthy lab, and a receiver Alertmanager cannot reach is named
as the broken hop."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory
from tests.support.cli import gameday, inventory, ok

pytestmark = pytest.mark.e2e

AM = "http://127.0.79.1:9093"


def _point_webhook_at(adir: Path, url: str) -> None:
    path = adir / "alertmanager.yml"
    config = yaml.safe_load(path.read_text())
    config["receivers"][0]["webhook_configs"][0]["url"] = url
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    httpx.post(AM + "/-/reload", timeout=10).raise_for_status()


def test_alerts_test_passes_on_a_healthy_lab_and_names_an_unreachable_receiver(
    tmp_path: Path, lab_down_after: list[Path]
) -> None:
    # its own lab (name, state folder, serving address), not the shared inventories/local.yaml
    named = f"name: alerts\n      state_dir: {tmp_path / 'lab-state'}"
    inv = inventory(tmp_path, "127.0.78.73", **{"name: local": named})
    lab_down_after.append(inv)
    ok(gameday("lab", "up", "--lab", str(inv), timeout=120))
    rules = LocalLab(load_inventory(inv)).state_dir / "prometheus" / "rules.yml"
    before = rules.read_text()

    p = ok(gameday("alerts", "test", "--lab", str(inv), timeout=120))
    assert "alert path works" in p.stdout + p.stderr
    assert "GamedayAlertsTest firing received" in p.stdout + p.stderr
    assert rules.read_text() == before  # the test rule is gone again

    adir = rules.parent.parent / "alertmanager"
    good = yaml.safe_load((adir / "alertmanager.yml").read_text())
    _point_webhook_at(adir, "http://127.0.79.1:9/alerts")  # a closed port
    try:
        p = gameday("alerts", "test", "--lab", str(inv), "--timeout", "5", timeout=120)
    finally:
        _point_webhook_at(adir, good["receivers"][0]["webhook_configs"][0]["url"])
    assert p.returncode == 7, p.stderr
    assert "receiver not reached" in p.stderr and "Traceback" not in p.stderr
    assert "127.0.79.1:9095/alerts" in p.stderr
    assert rules.read_text() == before
