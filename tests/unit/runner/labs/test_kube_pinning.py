"""gameday_kubernetes_node: a host of a Kubernetes lab pinned to one cluster node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.errors import InventoryError
from runner.labs.kubernetes import manifests as mf
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT

TESTSERVER = ROOT / "inventories" / "kube-testserver.yaml"
LOCAL = ROOT / "inventories" / "local.yaml"


def pin(tmp_path: Path, source: Path, old: str, node: str) -> Path:
    text = source.read_text()
    assert old in text
    indent = " " * (len(old) - len(old.lstrip()) + 2)
    out = tmp_path / "inventory.yaml"
    out.write_text(text.replace(old, f"{old}{indent}gameday_kubernetes_node: {node}\n", 1))
    return out


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def test_a_pinned_host_selects_its_node_beside_the_gpu_selector(tmp_path: Path) -> None:
    inv = load_inventory(pin(tmp_path, TESTSERVER, "            node1:\n", "gpu-node-7.lab"))
    head, worker = inv.node("node1"), inv.node("node2")
    assert head.kubernetes_node == "gpu-node-7.lab"
    pinned = pod_spec(mf.workload(inv, head))["nodeSelector"]
    free = pod_spec(mf.workload(inv, worker))["nodeSelector"]
    assert pinned == free | {"kubernetes.io/hostname": "gpu-node-7.lab"}
    assert "kubernetes.io/hostname" not in free


def test_the_local_lab_refuses_it_naming_the_line(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as e:
        load_inventory(pin(tmp_path, LOCAL, "            node1:\n", "gpu-node-1"))
    err = e.value
    assert err.exit_code == 2
    assert err.field == "node1.gameday_kubernetes_node"
    assert "this is a local lab" in str(err)
    assert err.line is not None and err.line > 1


def test_a_name_that_is_no_node_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as e:
        load_inventory(pin(tmp_path, TESTSERVER, "            node1:\n", "GPU_Node 1"))
    assert "gameday_kubernetes_node" in (e.value.field or "") + str(e.value)
