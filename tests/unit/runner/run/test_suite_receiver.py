"""A suite holds each lab instance's alert receiver from the instance's setup to its teardown,
when a scenario asks for a delivery: what Alertmanager delivers between scenarios is taken, and
each scenario's receiver is that same one."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
import yaml

from runner.labs.fake import FakeLab
from runner.run import suite
from runner.run.receiver import held
from runner.spec.inventory_load import load_inventory
from tests.support.fakelab import INVENTORY, wrong_flag


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _suite(tmp_path: Path, port: int) -> suite._Suite:
    data = yaml.safe_load(yaml.safe_dump(INVENTORY))
    data["all"]["vars"]["gameday_lab"]["monitoring"]["receiver_listen"] = f"127.0.0.1:{port}"
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(data))
    lab = FakeLab(load_inventory(tmp_path / "inventory.yaml"), wrong_flag(), state_dir=tmp_path)
    lab.up()
    return suite._Suite([lab], "run-1", tmp_path / "report", lambda _m: None, tagged=False)


def _alert(port: int) -> int:
    body = {"alerts": [{"status": "firing", "labels": {"alertname": "ServingDown"}}]}
    return httpx.post(f"http://127.0.0.1:{port}/alerts", json=body).status_code


def test_the_instances_receiver_listens_from_setup_to_teardown(tmp_path: Path) -> None:
    port = _free_port()
    s = _suite(tmp_path, port)
    s.receive = True
    s.setup(0)
    try:
        assert _alert(port) == 200  # between scenarios: taken, not refused
        with held("127.0.0.1", port, "fake") as scenarios:  # what a scenario's detect holds
            assert [a.alertname for a in scenarios.received()] == ["ServingDown"]
        assert _alert(port) == 200  # a scenario's end does not stop it
    finally:
        s.teardown(0)
    with pytest.raises(httpx.ConnectError):
        _alert(port)


def test_no_receiver_when_no_scenario_asks_for_a_delivery(tmp_path: Path) -> None:
    port = _free_port()
    s = _suite(tmp_path, port)
    s.setup(0)
    try:
        with pytest.raises(httpx.ConnectError):
            _alert(port)
    finally:
        s.teardown(0)
