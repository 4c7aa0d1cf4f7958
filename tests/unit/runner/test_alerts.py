"""Alert delivery: the Alertmanager config, Prometheus's alerting section, the rules'
annotations, the webhook receiver, the scenario field `delivered`, and the test rule file."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml

from runner.errors import LabError, ScenarioError
from runner.labs.common.alertmanager_config import (
    alertmanager_config,
    alertmanager_listen,
    receiver_listen,
    webhook_url,
)
from runner.labs.common.prometheus_config import rule_groups, write_prometheus
from runner.labs.registry import entry
from runner.run.parallel import instance
from runner.run.receiver import (
    TEST_ALERT,
    WebhookReceiver,
    held,
    parse_notification,
    with_test_rule,
)
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
LOCAL = load_inventory(ROOT / "inventories" / "local.yaml")
COMPOSE = load_inventory(ROOT / "inventories" / "compose.yaml")

PAYLOAD = {
    "version": "4",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "ServingDown", "severity": "page"},
            "annotations": {"procedure": "restart all four together"},
            "startsAt": "2026-12-01T05:00:00Z",
        }
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_alertmanager_routes_every_alert_to_the_runner_with_scaled_timings() -> None:
    # local.yaml: time scale 100, Prometheus on 127.0.79.1:9090
    assert alertmanager_listen(LOCAL.lab.monitoring) == "127.0.79.1:9093"  # type: ignore[arg-type]
    assert receiver_listen(LOCAL) == ("127.0.79.1", 9095)
    assert alertmanager_config(LOCAL, webhook_url(receiver_listen(LOCAL))) == {
        "route": {
            "receiver": "gameday-runner",
            "group_by": ["alertname"],
            "group_wait": "300ms",
            "group_interval": "3000ms",
            "repeat_interval": "144000ms",
        },
        "receivers": [
            {
                "name": "gameday-runner",
                "webhook_configs": [
                    {"url": "http://127.0.79.1:9095/alerts", "send_resolved": True}
                ],
            }
        ],
    }


def test_compose_receiver_is_on_the_management_gateway_and_alertmanager_published() -> None:
    listen = entry(COMPOSE.lab.kind).receiver_listen(COMPOSE)
    assert listen == ("172.30.80.254", 9095)
    assert webhook_url(listen) == "http://172.30.80.254:9095/alerts"
    assert alertmanager_listen(COMPOSE.lab.monitoring) == "127.0.0.1:19093"  # type: ignore[arg-type]


def test_a_compose_lab_without_its_section_has_the_receiver_beside_prometheus() -> None:
    bare = COMPOSE.model_copy(update={"lab": COMPOSE.lab.model_copy(update={"compose": None})})
    assert bare.lab.monitoring is not None
    host, port = bare.lab.monitoring.prometheus_listen.rsplit(":", 1)
    assert entry(bare.lab.kind).receiver_listen(bare) == (host, int(port) + 5)


def test_prometheus_sends_its_alerts_to_alertmanager(tmp_path: Path) -> None:
    write_prometheus(tmp_path, LOCAL, "management", {}, alertmanager="127.0.79.1:9093")
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert config["alerting"] == {
        "alertmanagers": [{"static_configs": [{"targets": ["127.0.79.1:9093"]}]}]
    }


def test_the_seed_rules_carry_procedure_log_command_and_runbook_section() -> None:
    rules = {
        r["alert"]: r["annotations"]
        for r in rule_groups(LOCAL.lab.monitoring, 100)["groups"][0]["rules"]  # type: ignore[arg-type]
    }
    serving = rules["ServingDown"]
    assert "restart all four together" in serving["procedure"]
    assert serving["log_command"].startswith("docker logs --tail 200")
    assert serving["runbook_section"] == "seeds/000 section 8"
    assert rules["ExporterTargetDown"]["runbook_section"] == "seeds/000 section 7"


def test_the_receiver_keeps_what_alertmanager_posts() -> None:
    port = _free_port()
    with WebhookReceiver("127.0.0.1", port) as r:
        assert httpx.post(f"http://127.0.0.1:{port}/alerts", json=PAYLOAD).status_code == 200
        assert httpx.post(f"http://127.0.0.1:{port}/other", json=PAYLOAD).status_code == 404
        got = r.wait_for(lambda a: a.alertname == "ServingDown", 2)
        assert got is not None
        assert (got.status, got.annotations) == (
            "firing",
            {"procedure": "restart all four together"},
        )
        assert got.starts_at == "2026-12-01T05:00:00Z"
        assert len(r.received()) == 1
        assert r.wait_for(lambda a: a.alertname == "Other", 0.1) is None


def test_a_receiver_that_cannot_listen_is_one_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(LabError) as e:
            WebhookReceiver("127.0.0.1", port).start()
    assert f"the alert receiver cannot listen on 127.0.0.1:{port}" in e.value.message


def test_a_payload_that_is_not_alertmanagers_gives_nothing() -> None:
    now = datetime.now(UTC)
    assert parse_notification({"alerts": "x"}, now) == []
    assert parse_notification(None, now) == []
    assert [a.alertname for a in parse_notification(PAYLOAD, now)] == ["ServingDown"]


def test_the_test_rule_is_added_to_the_seed_rules_not_instead() -> None:
    original = yaml.safe_dump(rule_groups(LOCAL.lab.monitoring, 100))  # type: ignore[arg-type]
    groups = yaml.safe_load(with_test_rule(original, "abc"))["groups"]
    assert [g["name"] for g in groups] == ["gameday-seed-rules", "gameday-alerts-test"]
    rule = groups[1]["rules"][0]
    assert (rule["alert"], rule["expr"], rule["labels"]["gameday_test"]) == (
        TEST_ALERT,
        "vector(1) > 0",
        "abc",
    )


def test_head_only_restart_asks_for_delivery_on_every_lab() -> None:
    sc = load_scenario(ROOT / "scenarios" / "head-only-restart.yaml").scenario
    local = sc.for_lab(LabKind.LOCAL).detect.alerts[0]
    assert (local.name, local.delivered, local.delivery_window_s) == ("ServingDown", True, 690)
    assert local.annotations == {
        "procedure": "restart all four together",
        "log_command": "docker logs",
        "runbook_section": "seeds/000 section 8",
    }
    assert sc.for_lab(LabKind.COMPOSE).detect.alerts[0] == local
    assert sc.for_lab(LabKind.KUBERNETES).detect.alerts[0] == local


def test_dhcp_address_change_asks_for_delivery_with_the_seed_annotations() -> None:
    dhcp = load_scenario(ROOT / "scenarios" / "dhcp-address-change.yaml").scenario
    alert = dhcp.for_lab(LabKind.COMPOSE).detect.alerts[0]
    assert (alert.name, alert.delivered, alert.delivery_window_s) == (
        "ExporterTargetDown",
        True,
        780,
    )
    assert alert.annotations["runbook_section"] == "seeds/000 section 7"


def test_annotations_without_delivered_are_refused_at_their_line(tmp_path: Path) -> None:
    text = (ROOT / "scenarios" / "dhcp-address-change.yaml").read_text()
    p = tmp_path / "s.yaml"
    p.write_text(text.replace("      delivered: true  #", "      delivered: false  #"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "annotations and delivered_within_s need delivered: true" in str(e.value)
    assert e.value.field == "detect.alerts.0"


# ---- each lab instance's alerts are its own ------------------------------------------------


def _alert(lab: str | None, name: str = "ServingDown") -> dict[str, object]:
    labels = {"alertname": name, "severity": "page"} | ({"gameday_lab": lab} if lab else {})
    return {"status": "firing", "labels": labels, "startsAt": "2026-12-01T05:00:00Z"}


def test_each_local_instance_s_prometheus_names_its_own_lab_on_its_alerts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "state"))
    seen = {}
    for k in (0, 1, 2):
        inv = instance(LOCAL, k)
        mon = inv.lab.monitoring
        assert mon is not None
        pdir = tmp_path / f"p{k}"
        write_prometheus(pdir, inv, "management", {}, alertmanager=alertmanager_listen(mon))
        config = yaml.safe_load((pdir / "prometheus.yml").read_text())
        am = yaml.safe_load(yaml.safe_dump(alertmanager_config(inv, "x")))
        seen[k] = (
            config["global"]["external_labels"]["gameday_lab"],
            config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"][0],
            receiver_listen(inv),
            am["route"]["receiver"],
        )
    assert seen[0] == ("local", "127.0.79.1:9093", ("127.0.79.1", 9095), "gameday-runner")
    assert seen[2] == ("local-p2", "127.2.79.1:9093", ("127.2.79.1", 9095), "gameday-runner")
    # no two instances share a lab label, an Alertmanager or a receiver address
    for i in range(3):
        assert len({seen[k][i] for k in seen}) == 3


def test_the_receiver_keeps_another_labs_alerts_apart() -> None:
    port = _free_port()
    with WebhookReceiver("127.0.0.1", port, "local-p1") as r:
        body = {"version": "4", "alerts": [_alert("local-p1"), _alert("local-p2", "Other")]}
        assert httpx.post(f"http://127.0.0.1:{port}/alerts", json=body).status_code == 200
        assert r.wait_for(lambda a: a.alertname == "ServingDown", 2) is not None
        assert [a.alertname for a in r.received()] == ["ServingDown"]
        assert [(a.alertname, a.lab()) for a in r.foreign()] == [("Other", "local-p2")]
        # never taken for this lab's, however long it waits
        assert r.wait_for(lambda a: a.alertname == "Other", 0.1) is None


def test_an_alert_without_the_lab_label_is_the_labs_own_and_no_lab_takes_every_alert() -> None:
    now = datetime.now(UTC)
    mine = WebhookReceiver("127.0.0.1", 0, "local")
    mine._add(parse_notification({"alerts": [_alert(None), _alert("local")]}, now))
    assert (len(mine.received()), mine.foreign()) == (2, [])
    anyone = WebhookReceiver("127.0.0.1", 0)
    anyone._add(parse_notification({"alerts": [_alert("local-p3")]}, now))
    assert (len(anyone.received()), anyone.foreign()) == (1, [])


def test_received_and_foreign_since_a_moment() -> None:
    early, late = datetime(2026, 12, 1, 5, 0, tzinfo=UTC), datetime(2026, 12, 1, 5, 1, tzinfo=UTC)
    r = WebhookReceiver("127.0.0.1", 0, "local")
    r._add(parse_notification({"alerts": [_alert("local"), _alert("x")]}, early))
    r._add(parse_notification({"alerts": [_alert("local", "B"), _alert("y")]}, late))
    assert [a.alertname for a in r.received(late)] == ["B"]
    assert [a.lab() for a in r.foreign(late)] == ["y"]
    assert len(r.received()) == len(r.foreign()) == 2


def test_a_held_receiver_is_shared_until_its_last_holder_is_done() -> None:
    port = _free_port()
    with held("127.0.0.1", port, "local") as outer:
        with held("127.0.0.1", port, "local") as inner:
            assert inner is outer
        # still listening for the outer holder
        assert httpx.post(f"http://127.0.0.1:{port}/alerts", json=PAYLOAD).status_code == 200
        with pytest.raises(LabError, match="lab 'local'"), held("127.0.0.1", port, "other"):
            pass
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"http://127.0.0.1:{port}/alerts", json=PAYLOAD)
