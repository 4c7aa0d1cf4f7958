"""The stand-in's rewrite of the lab's Prometheus configuration: pod discovery through its HTTP
endpoint, and an Alertmanager named by a Service's DNS name reached through that Service's pods
(the stand-in has no cluster DNS)."""

from __future__ import annotations

from typing import Any

import yaml

from runner.labs.kubernetes import alertmanager as kam
from runner.labs.kubernetes import monitoring as kmon
from runner.spec.inventory_load import load_inventory
from tests.kubeapi import httpsd
from tests.support.cli import ROOT
from tests.support.kube_sd import as_http_sd

API = {"url": "https://127.0.0.1:6443", "token": "t0ken"}


def lab_config() -> tuple[dict[str, Any], dict[str, Any]]:
    inv = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    objs = kmon.manifests(inv)
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and "prometheus.yml" in o["data"])
    svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == kam.NAME)
    return yaml.safe_load(cm["data"]["prometheus.yml"]), svc


def pod(name: str, labels: dict[str, str], port: int, port_name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "gameday-lab", "uid": name, "labels": labels},
        "spec": {
            "containers": [{"name": "c", "ports": [{"containerPort": port, "name": port_name}]}]
        },
        "status": {"podIP": "127.0.90.7", "phase": "Running"},
    }


def kept(entry: dict[str, Any], groups: list[dict[str, Any]]) -> list[str]:
    """The targets `entry`'s keep rules leave of `groups` (Prometheus's regexes are anchored)."""
    import re

    out = []
    for g in groups:
        if all(
            re.fullmatch(r["regex"], g["labels"].get(r["source_labels"][0], ""))
            for r in entry["relabel_configs"]
        ):
            out += g["targets"]
    return out


def test_an_alertmanager_named_by_its_service_is_reached_through_the_services_pods() -> None:
    config, svc = lab_config()
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        kam.target(load_inventory(ROOT / "inventories" / "kube-testserver.yaml"))
    ]
    out = as_http_sd(config, services=[svc])
    assert out is not None
    [entry] = out["alerting"]["alertmanagers"]
    assert "static_configs" not in entry
    [sd] = entry["http_sd_configs"]
    assert sd["url"].endswith("/gameday/v1/http-sd/namespaces/gameday-lab/pods")
    # only the Alertmanager pod's web port, not Prometheus's nor an engine's
    sel = svc["spec"]["selector"]
    am = pod("am", sel, kam.PORT, "web")
    prom = pod("prom", {**sel, "app.kubernetes.io/name": "gameday-prometheus"}, 9090, "web")
    other_port = pod("am2", sel, 9094, "cluster")
    groups = httpsd.target_groups([am, prom, other_port])
    assert kept(entry, groups) == [f"127.0.90.7:{kam.PORT}"]


def test_a_target_that_is_no_known_service_is_left_alone() -> None:
    config, _ = lab_config()
    out = as_http_sd(config, services=[])
    assert out is not None
    assert out["alerting"] == config["alerting"]


def test_other_alertmanagers_and_an_entrys_own_relabelling_are_kept() -> None:
    config, svc = lab_config()
    own = [{"source_labels": ["__address__"], "regex": ".*", "action": "keep"}]
    config["alerting"]["alertmanagers"][0]["relabel_configs"] = own
    dns = {"dns_sd_configs": [{"names": ["am.example"], "type": "A", "port": 9093}]}
    config["alerting"]["alertmanagers"].append(dns)
    out = as_http_sd(config, services=[svc])
    assert out is not None
    first, second = out["alerting"]["alertmanagers"]
    assert first["relabel_configs"][-1] == own[0] and len(first["relabel_configs"]) > 1
    assert second == dns
