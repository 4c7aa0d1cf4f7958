"""`gameday watchdog`'s bad input: one clear message, a documented exit code, no traceback."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from tests.support.cli import ROOT

LOCAL = str(ROOT / "inventories" / "local.yaml")


def run(*args: str) -> tuple[int, str]:
    from runner.cli.main import main

    r = CliRunner().invoke(main, ["watchdog", "--lab", LOCAL, *args])
    return r.exit_code, r.output


def test_an_unknown_group_is_exit_2_naming_it() -> None:
    code, out = run("--group", "tp_grup")
    assert code == 2
    assert "no node or group 'tp_grup' in the lab" in out
    assert "Traceback" not in out


def test_an_alert_url_that_is_not_http_is_exit_2() -> None:
    code, out = run("--group", "tp_group", "--alert-url", "file:///etc/passwd")
    assert code == 2
    assert "--alert-url 'file:///etc/passwd' is not an http(s) URL" in out


def test_a_zero_probe_interval_is_refused_by_the_option() -> None:
    code, out = run("--group", "tp_group", "--probe-interval-s", "0")
    assert code == 2
    assert "Invalid value for '--probe-interval-s'" in out


def test_a_metrics_port_in_use_is_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    import runner.cli.watchdog

    class UpLab:
        def is_up(self) -> bool:
            return True

    monkeypatch.setattr(runner.cli.watchdog, "open_lab", lambda inventory: UpLab())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out = run("--group", "tp_group", "--metrics-port", str(port))
    assert code == 3, out
    assert out == (
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use\n"
        "  hint: choose another --metrics-port (0: any free port)\n"
    )


def test_alert_url_and_no_alert_exclude_each_other() -> None:
    code, out = run("--group", "tp_group", "--alert-url", "http://am:9093", "--no-alert")
    assert code == 2
    assert "--alert-url and --no-alert exclude each other" in out


def test_the_alert_goes_to_the_labs_own_alertmanager_by_default() -> None:
    from runner.cli.watchdog import lab_alertmanager
    from runner.spec.inventory_load import load_inventory

    assert lab_alertmanager(load_inventory(ROOT / "inventories" / "local.yaml")) == (
        "http://127.0.79.1:9093/api/v2/alerts"
    )
    # inside the cluster: the runner cannot reach it, so only --alert-url sends one
    assert lab_alertmanager(load_inventory(ROOT / "inventories" / "kind.yaml")) is None
