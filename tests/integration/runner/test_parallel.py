"""`--parallel N`: instance k of the local lab is the same lab on 127.k.x.y under its own name;
of the compose lab, a separate Compose project on its own subnets and ports."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runner.labs.common.ansible import ansible_bin
from runner.labs.compose.project import compose_file, playbooks_dir
from runner.run.parallel import instance
from runner.spec.inventory_load import load_inventory


def test_compose_instance_is_a_separate_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instance k of the compose lab: project, containers, subnets and published ports of its
    own, and a real Ansible inventory written for its host actions."""
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    inv = load_inventory(ROOT / "inventories" / "compose.yaml")
    one = instance(inv, 1)
    assert one.path == tmp_path / "compose-p1" / "inventory.yaml"
    assert one.lab.name == "compose-p1"
    assert one.lab.compose is not None and inv.lab.compose is not None
    assert one.lab.compose.project == "gameday-compose-p1"
    assert one.lab.compose.subnets == {"management": "172.30.82.0/24", "overlay": "172.30.83.0/24"}
    # the inventory names no compose file or playbooks: every instance uses the package's
    assert compose_file(one, one.lab.compose) == ROOT / "compose" / "compose.yaml"
    assert playbooks_dir(one, one.lab.compose) == ROOT / "playbooks"
    assert one.lab.monitoring is not None and one.lab.monitoring.prometheus_listen == (
        "127.0.0.1:19190"
    )
    by_name = {n.name: n for n in one.nodes}
    assert by_name["serving"].published == "127.0.0.1:18100"
    assert by_name["node1"].published == "127.0.0.1:18101"
    assert by_name["node3"].management_address == "172.30.82.13"
    assert by_name["node3"].overlay_address == "172.30.83.3"
    # the group's rendezvous moves with its overlay network
    i = list(by_name["node2"].args).index("--master-addr")
    assert by_name["node2"].args[i + 1] == "172.30.83.1"
    dump = one.model_dump_json()
    assert "172.30.80." not in dump and "172.30.81." not in dump
    # host actions target the instance's containers: Ansible reads the written inventory
    out = subprocess.run(
        [str(Path(ansible_bin()) / "ansible-inventory"), "-i", str(one.path), "--list"],
        capture_output=True,
        text=True,
        check=True,
    )
    hostvars = json.loads(out.stdout)["_meta"]["hostvars"]
    assert hostvars["node3"]["ansible_host"] == "gameday-compose-p1-node3-host"
    assert hostvars["serving"]["ansible_host"] == "gameday-compose-p1-serving"
    assert instance(inv, 3).lab.compose.subnets["overlay"] == "172.30.87.0/24"  # type: ignore[union-attr]
    # an explicit Prometheus URL moves with its published port
    text = (ROOT / "inventories" / "compose.yaml").read_text()
    src = tmp_path / "with-url.yaml"
    src.write_text(
        text.replace(
            "      monitoring:", "      prometheus_url: http://127.0.0.1:19090/\n      monitoring:"
        )
    )
    assert instance(load_inventory(src), 2).lab.prometheus == "http://127.0.0.1:19290/"


ROOT = Path(__file__).resolve().parents[3]
