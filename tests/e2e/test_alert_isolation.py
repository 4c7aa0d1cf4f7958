"""Each instance of `--parallel` has an alert path of its own: an alert that fires in instance
k's Prometheus reaches instance k's receiver and never instance j's; and a lab brought up again
delivers an alert its previous life already delivered (Alertmanager's notification log does not
outlive the lab)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from runner.labs.common.alertmanager_config import alertmanager_url, receiver_listen
from runner.labs.common.prometheus_config import reload
from runner.labs.local.driver import LocalLab
from runner.run.parallel import instance
from runner.run.receiver import WebhookReceiver, check_path, with_test_rule
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT

pytestmark = pytest.mark.e2e


@pytest.fixture
def local_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., dict[int, LocalLab]]]:
    """`local_instances(1, 2)`: instances 1 and 2 of the local lab (127.1.x.y, 127.2.x.y), their
    state under tmp_path, up with Prometheus scraping; each is taken down after the test,
    whatever happens."""
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "state"))
    inv = load_inventory(ROOT / "inventories" / "local.yaml")
    started: list[LocalLab] = []

    def up(*ks: int) -> dict[int, LocalLab]:
        labs = {k: LocalLab(instance(inv, k)) for k in ks}
        for lab in labs.values():
            started.append(lab)
            lab.up()
        for lab in labs.values():
            lab.monitoring_ready(60)
        return labs

    try:
        yield up
    finally:
        for lab in started:
            lab.down()


def _receiver(lab: LocalLab) -> WebhookReceiver:
    """A receiver at the instance's address that takes every alert, whoever sent it: a crossing
    would show here, not be filtered out."""
    return WebhookReceiver(*receiver_listen(lab.inventory))


def _mon(lab: LocalLab) -> tuple[Path, str, str]:
    mon = lab.inventory.lab.monitoring
    prom = lab.prometheus_url()
    assert mon is not None and prom is not None
    return lab.state_dir / "prometheus" / "rules.yml", prom, alertmanager_url(mon)


def test_an_alert_of_instance_k_reaches_instance_k_only(
    local_instances: Callable[..., dict[int, LocalLab]],
) -> None:
    labs = local_instances(1, 2)
    _only_k_receives(labs[1], labs[2])
    _only_k_receives(labs[2], labs[1])


def _only_k_receives(k: LocalLab, j: LocalLab) -> None:
    """The test alert, fired in k's Prometheus, reaches k's receiver and not j's."""
    with _receiver(k) as mine, _receiver(j) as other:
        got = check_path(*_mon(k), mine, timeout=30)
        token = got.delivered.labels["gameday_test"]
        assert got.delivered.lab() == k.inventory.lab.name
        # well past j's group_wait (0.3 s): had j's Alertmanager the alert, it would have sent it
        assert other.wait_for(lambda a: a.labels.get("gameday_test") == token, 3) is None
        in_j = httpx.get(
            _mon(j)[2] + "/api/v2/alerts", params={"filter": f'gameday_test="{token}"'}
        ).json()
        assert in_j == []  # not in j's Alertmanager either
        assert {a.lab() for a in mine.received()} == {k.inventory.lab.name}
        assert {a.lab() for a in other.received()} <= {j.inventory.lab.name}


def _fire(lab: LocalLab, receiver: WebhookReceiver, timeout: float) -> bool:
    """An alert with the same labels every time fires in the lab's Prometheus: delivered to
    `receiver` within `timeout` s?"""
    rules, prom, _ = _mon(lab)
    rules.write_text(with_test_rule(rules.read_text(), "same-every-time"))
    reload(prom)
    got = receiver.wait_for(
        lambda a: a.labels.get("gameday_test") == "same-every-time" and a.status == "firing",
        timeout,
    )
    return got is not None


def test_a_lab_brought_up_again_delivers_what_its_previous_life_delivered(
    local_instances: Callable[..., dict[int, LocalLab]],
) -> None:
    lab = local_instances(3)[3]
    with _receiver(lab) as receiver:
        assert _fire(lab, receiver, 30)
    # the resolution never reaches a receiver; the lab goes down and comes up again
    lab.down()
    lab.up()
    lab.monitoring_ready(60)
    with _receiver(lab) as receiver:
        # Alertmanager's repeat_interval is 144 s at x100: a notification log kept from the
        # lab's previous life would hold this firing back that long
        assert _fire(lab, receiver, 30)


def test_a_lab_brought_up_again_has_none_of_its_previous_lifes_samples(
    local_instances: Callable[..., dict[int, LocalLab]],
) -> None:
    """Prometheus evaluates its rules from its start, on its data within the 5 min lookback: a
    previous life's last samples (an engine down as that lab stopped) would fire an alert the
    new lab never earned, active before any injection."""
    lab = local_instances(4)[4]
    _, prom, _ = _mon(lab)
    before = time.time()
    assert httpx.get(prom + "/api/v1/query", params={"query": "up", "time": before}).json()["data"][
        "result"
    ]
    lab.down()
    lab.up()
    lab.monitoring_ready(60)
    old = httpx.get(prom + "/api/v1/query", params={"query": "up", "time": before}).json()
    assert old["data"]["result"] == []
