"""A host that is not an engine (the disaggregated-serving proxy) says what it runs and where it
answers once it serves: on compose labs, whose services each run their own command; the other
kinds start every node with the lab's engine command, and refuse the two."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import InventoryError
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[3]


def test_the_compose_lab_runs_its_proxy_by_its_own_command() -> None:
    inv = load_inventory(ROOT / "inventories" / "compose.yaml")
    proxy, prefill = inv.node("proxy"), inv.node("prefill")
    assert proxy.program(inv.lab.engine_command) == ("vllm-lab", "proxy")
    assert proxy.health_path == "/healthcheck"
    assert prefill.program(inv.lab.engine_command) == ("vllm-lab", "serve")
    assert prefill.health_path == "/health"


@pytest.mark.parametrize("inventory", ["local.yaml", "kube-testserver.yaml"])
@pytest.mark.parametrize(
    ("key", "value"),
    [("gameday_command", "[vllm-lab, proxy]"), ("gameday_health_path", "/healthcheck")],
)
def test_other_lab_kinds_refuse_a_node_that_is_not_an_engine(
    tmp_path: Path, inventory: str, key: str, value: str
) -> None:
    text = (ROOT / "inventories" / inventory).read_text()
    at = text.index("gameday_role: serving")
    indent = text[:at].rsplit("\n", 1)[1]
    path = tmp_path / inventory
    path.write_text(text[:at] + f"{key}: {value}\n{indent}" + text[at:])
    with pytest.raises(InventoryError) as err:
        load_inventory(path)
    assert f"{key} (a node that is not an engine, such as a proxy) is for compose labs" in str(
        err.value
    )
