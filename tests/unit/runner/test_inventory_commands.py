"""A host that is not an engine (the disaggregated-serving proxy) says what it runs and where it
answers once it serves: on compose labs, whose services each run their own command, and on
Kubernetes labs, whose pods do; the local lab starts every node with the lab's engine command,
and refuses the two. On Kubernetes the servers of one group (a prefill and a decode engine and
their proxy) are StatefulSets under the group's headless Service: stable DNS names."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import InventoryError
from runner.labs.kubernetes import lab_objects, lws
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes import monitoring as kmon
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[3]


def test_the_compose_lab_runs_its_proxy_by_its_own_command() -> None:
    inv = load_inventory(ROOT / "inventories" / "compose.yaml")
    proxy, prefill = inv.node("proxy"), inv.node("prefill")
    assert proxy.program(inv.lab.engine_command) == ("vllm-lab", "proxy")
    assert proxy.health_path == "/healthcheck"
    assert prefill.program(inv.lab.engine_command) == ("vllm-lab", "serve")
    assert prefill.health_path == "/health"


def test_the_kubernetes_lab_runs_its_proxy_by_its_own_command() -> None:
    inv = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    proxy = mf.workload(inv, inv.node("proxy"))
    c = proxy["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["vllm-lab", "proxy"]
    assert c["startupProbe"]["httpGet"]["path"] == "/healthcheck"
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthcheck"
    assert "nvidia.com/gpu" not in c["resources"]["requests"]  # no GPU of its own
    prefill = mf.workload(inv, inv.node("prefill"))
    pc = prefill["spec"]["template"]["spec"]["containers"][0]
    assert pc["command"] == ["vllm-lab", "serve"]
    assert pc["startupProbe"]["httpGet"]["path"] == "/health"
    # the proxy is no engine: Prometheus scrapes the two engines, not it
    assert inv.lab.monitoring is not None
    keep = kmon.scrape_config(inv, inv.lab.monitoring)["relabel_configs"][1]["regex"]
    assert "prefill;8000" in keep and "decode;8000" in keep and "proxy" not in keep


def test_servers_of_one_group_are_statefulsets_under_its_headless_service() -> None:
    inv = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    kinds = {
        d["metadata"]["name"]: d["kind"]
        for d in lab_objects.all_manifests(inv)
        if d["kind"] in ("Deployment", "StatefulSet")
    }
    assert kinds["serving"] == "Deployment"  # a server by itself
    assert {kinds[n] for n in ("prefill", "decode", "proxy", "node1")} == {"StatefulSet"}
    sts = mf.workload(inv, inv.node("prefill"))
    assert sts["spec"]["serviceName"] == "pd"
    pd = mf.headless_service(inv, "pd")
    assert pd["spec"]["clusterIP"] == "None" and pd["spec"]["publishNotReadyAddresses"]
    assert pd["spec"]["selector"][mf.GROUP_LABEL] == "pd"
    assert pd["spec"]["ports"] == [{"name": "http", "port": 8000, "protocol": "TCP"}]
    assert mf.headless_groups(inv) == ["pd", "tp-group"]
    assert mf.groups(inv) == ["tp-group"]  # a LeaderWorkerSet is a tensor-parallel group's
    # with the group as a LeaderWorkerSet, the servers keep their StatefulSets and Service
    as_lws = {(d["kind"], d["metadata"]["name"]) for d in lws.all_manifests(inv)}
    assert {("Service", "pd"), ("StatefulSet", "prefill"), ("StatefulSet", "proxy")} <= as_lws
    assert ("LeaderWorkerSet", "tp-group") in as_lws


@pytest.mark.parametrize(
    ("key", "value"),
    [("gameday_command", "[vllm-lab, proxy]"), ("gameday_health_path", "/healthcheck")],
)
def test_the_local_lab_refuses_a_node_that_is_not_an_engine(
    tmp_path: Path, key: str, value: str
) -> None:
    inventory = "local.yaml"
    text = (ROOT / "inventories" / inventory).read_text()
    at = text.index("gameday_role: serving")
    indent = text[:at].rsplit("\n", 1)[1]
    path = tmp_path / inventory
    path.write_text(text[:at] + f"{key}: {value}\n{indent}" + text[at:])
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    msg = f"{key} (a node that is not an engine, such as a proxy) is for compose and Kubernetes"
    assert msg in str(err.value)
