"""Hostile input that reaches the labs' tools: Ansible never renders a value gameday passes it,
destructive calls check ownership first, the Kubernetes lab needs an explicit kube context, and
every call into Ansible, Docker or the Kubernetes API that can block has a timeout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import InventoryError, ScenarioError
from runner.spec.inventory_load import load_inventory
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "name", ["{{ lookup('pipe', 'touch /tmp/x') }}", "../../etc/x", "a/b", "Omniparser", ""]
)
def test_a_process_name_to_stop_is_a_plain_name(tmp_path: Path, name: str) -> None:
    text = (ROOT / "scenarios" / "stray-gpu-process.yaml").read_text()
    old = "{kind: stop_process, node: node1, name: omniparser}"
    assert old in text
    p = tmp_path / "s.yaml"
    p.write_text(
        text.replace(old, "{kind: stop_process, node: node1, name: " + json.dumps(name) + "}")
    )
    with pytest.raises(ScenarioError) as exc:
        load_scenario(p)
    assert exc.value.exit_code == 2 and exc.value.line is not None
    assert exc.value.field is not None and exc.value.field.endswith("name")


KUBE_INVENTORIES = [
    p for p in sorted((ROOT / "inventories").glob("*.yaml")) if "kind: kubernetes" in p.read_text()
]


def test_every_kubernetes_inventory_names_its_context() -> None:
    assert len(KUBE_INVENTORIES) >= 3
    for p in KUBE_INVENTORIES:
        spec = load_inventory(p).lab.kubernetes
        assert spec is not None and spec.context


@pytest.mark.parametrize("source", KUBE_INVENTORIES, ids=lambda p: p.stem)
def test_a_kubernetes_inventory_without_a_context_is_refused(tmp_path: Path, source: Path) -> None:
    lines = source.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.strip().startswith("context:")]
    assert len(kept) == len(lines) - 1
    p = tmp_path / source.name
    p.write_text("".join(kept))
    with pytest.raises(InventoryError) as exc:
        load_inventory(p)
    err = exc.value
    assert err.exit_code == 2 and err.file == str(p)
    assert err.field == "all.vars.gameday_lab.kubernetes.context"
    assert err.line == 1 + next(i for i, ln in enumerate(kept) if ln.strip() == "kubernetes:")
    assert err.hint is not None and "context" in err.hint


def test_a_kubernetes_lab_without_a_kubernetes_section_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_text(
        "all:\n  vars:\n    gameday_lab: {name: k, kind: kubernetes}\n"
        "  hosts:\n    serving: {gameday_role: serving, gameday_address: 0.0.0.0,\n"
        "              gameday_engine_args: [m]}\n"
    )
    with pytest.raises(InventoryError, match=r"inv\.yaml:3 \[all\.vars\.gameday_lab\.kubernetes"):
        load_inventory(p)
