"""The lab's facts a user-written step reads from its environment, per lab kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.labs.compose.driver import ComposeLab
from runner.labs.kubernetes.driver import KubernetesLab
from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[4]


def test_local_facts() -> None:
    facts = LocalLab(load_inventory(ROOT / "inventories" / "local.yaml")).facts()
    assert {k: v for k, v in facts.items() if "NODE2" in k or not k.startswith("GAMEDAY_NODE")} == {
        "GAMEDAY_LAB": str(ROOT / "inventories" / "local.yaml"),
        "GAMEDAY_LAB_NAME": "local",
        "GAMEDAY_LAB_KIND": "local",
        "GAMEDAY_NODE_NODE2_ADDRESS": "127.0.81.2",
        "GAMEDAY_NODE_NODE2_URL": "http://127.0.81.2:8000",
    }
    assert facts["GAMEDAY_NODE_SERVING_URL"] == "http://127.0.77.10:8000"


def test_compose_facts_name_the_project() -> None:
    facts = ComposeLab(load_inventory(ROOT / "inventories" / "compose.yaml")).facts()
    assert facts["GAMEDAY_COMPOSE_PROJECT"] == "gameday-compose"
    assert facts["GAMEDAY_NODE_SERVING_URL"] == "http://127.0.0.1:18000"
    assert facts["GAMEDAY_LAB_KIND"] == "compose"


def test_kubernetes_facts_name_context_namespace_and_kubeconfig(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/home/team/.kube/eks")
    facts = KubernetesLab(load_inventory(ROOT / "inventories" / "eks.yaml")).facts()
    assert {k: v for k, v in facts.items() if k.startswith("GAMEDAY_KUBE")} == {
        "GAMEDAY_KUBE_CONTEXT": "vllm-workshop",
        "GAMEDAY_KUBE_NAMESPACE": "vllm-gameday",
        "GAMEDAY_KUBECONFIG": "/home/team/.kube/eks",
    }
    # no pod yet, so no URL; the address is the inventory's
    assert "GAMEDAY_NODE_SERVING_URL" not in facts
    assert facts["GAMEDAY_NODE_SERVING_ADDRESS"] == "0.0.0.0"
