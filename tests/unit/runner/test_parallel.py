"""`--parallel N`: instance k of the local lab is the same lab on 127.k.x.y under its own name;
of the compose lab, a separate Compose project on its own subnets and ports."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.errors import InputError
from runner.labs.kubernetes import lab_objects
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes.alertmanager import config_map as am_cm
from runner.run.parallel import check_parallel, instance, run_workers
from runner.spec.inventory import ComposeSpec
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[3]
LOCAL = ROOT / "inventories" / "local.yaml"


def test_instance_zero_is_the_inventory_itself() -> None:
    inv = load_inventory(LOCAL)
    assert instance(inv, 0) is inv


def test_instance_k_moves_every_loopback_address_and_renames_the_lab() -> None:
    inv = load_inventory(LOCAL)
    two = instance(inv, 2)
    assert two.lab.name == "local-p2"
    assert two.lab.monitoring is not None and inv.lab.monitoring is not None
    assert two.lab.monitoring.prometheus_listen == "127.2.79.1:9090"
    for a, b in zip(inv.nodes, two.nodes, strict=True):
        assert b.address == a.address.replace("127.0.", "127.2.", 1)
        assert b.port == a.port
        if a.management_address:
            assert b.management_address == a.management_address.replace("127.0.", "127.2.", 1)
        # the group's rendezvous moves with it: --master-addr 127.0.81.1 -> 127.2.81.1
        assert [x.replace("127.0.", "127.2.") for x in a.args] == list(b.args)
    assert "127.0." not in two.model_dump_json()


def test_instance_k_is_an_inventory_file_of_its_own() -> None:
    """What a team's step is handed (GAMEDAY_LAB) names instance k, never instance 0."""
    inv = load_inventory(LOCAL)
    two = instance(inv, 2)
    assert two.path != inv.path
    assert two.path.parent.name == "local-p2"  # in its own state directory
    again = load_inventory(two.path)
    assert again.lab.name == "local-p2"
    assert [n.address for n in again.nodes] == [n.address for n in two.nodes]
    assert two.path.stat().st_mode & 0o077 == 0  # the nodes' environments are in it
    assert "127.0." not in two.path.read_text().split("\n", 1)[1]


def test_instance_k_moves_a_prometheus_address_left_at_its_default(tmp_path: Path) -> None:
    text = LOCAL.read_text().replace("        prometheus_listen: 127.0.79.1:9090\n", "", 1)
    assert "prometheus_listen" not in text
    (tmp_path / "local.yaml").write_text(text)
    inv = load_inventory(tmp_path / "local.yaml")
    assert inv.lab.monitoring is not None
    assert inv.lab.monitoring.prometheus_listen == "127.0.79.1:9090"  # the default
    two = instance(inv, 2)
    assert two.lab.monitoring is not None
    assert two.lab.monitoring.prometheus_listen == "127.2.79.1:9090"


def test_parallel_is_refused_where_it_cannot_isolate() -> None:
    kube = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    check_parallel(kube, 64)  # a namespace per instance
    with pytest.raises(InputError, match="longer than 63") as long:
        check_parallel(kube.model_copy(update={"lab": kube.lab.model_copy(update={
            "kubernetes": kube.lab.kubernetes.model_copy(update={"namespace": "n" * 61})})}),  # type: ignore[union-attr]
            2)  # fmt: skip
    assert long.value.field == "gameday_lab.kubernetes.namespace"
    with pytest.raises(InputError, match=r"1\.\.64"):
        check_parallel(load_inventory(LOCAL), 0)
    check_parallel(load_inventory(ROOT / "inventories" / "kube-testserver.yaml"), 1)
    compose = load_inventory(ROOT / "inventories" / "compose.yaml")
    check_parallel(compose, 64)  # 172.30.80/81 + 2 x 63 = 172.30.206/207
    with pytest.raises(InputError, match="254") as exc:
        check_parallel(compose.model_copy(update={"lab": compose.lab.model_copy(update={
            "compose": ComposeSpec(subnets={"management": "10.9.200.0/24",
                                            "overlay": "10.9.201.0/24"})})}), 40)  # fmt: skip
    assert exc.value.field == "gameday_lab.compose.subnets"


def test_workers_share_one_queue_and_keep_the_order() -> None:
    seen: dict[int, list[int]] = {0: [], 1: []}
    events: list[str] = []

    def work(k: int, item: object) -> int:
        seen[k].append(int(item))  # type: ignore[call-overload]
        return int(item) * 10  # type: ignore[call-overload]

    results, errors = run_workers(
        list(range(7)),  # type: ignore[arg-type]
        2,
        work,
        lambda k: events.append(f"up {k}"),
        lambda k: events.append(f"down {k}"),
    )
    assert errors == []
    assert results == [0, 10, 20, 30, 40, 50, 60]
    assert sorted(seen[0] + seen[1]) == list(range(7))
    assert sorted(events) == ["down 0", "down 1", "up 0", "up 1"]


def test_a_failing_worker_still_tears_its_lab_down() -> None:
    events: list[str] = []

    def work(k: int, item: object) -> None:
        raise RuntimeError("lab broke")

    _, errors = run_workers([1], 1, work, lambda k: None, lambda k: events.append("down"))  # type: ignore[list-item]
    assert [str(e) for e in errors] == ["lab broke"] and events == ["down"]


def test_a_kubernetes_instance_is_a_namespace_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    inv = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    three = instance(inv, 3)
    assert three.path == tmp_path / "kube-testserver-p3" / "inventory.yaml"
    assert three.lab.name == "kube-testserver-p3"
    assert three.lab.kubernetes is not None
    assert three.lab.kubernetes.namespace == "gameday-lab-s3"
    # the relative kubeconfig still reaches the same file from the instance's own folder
    assert three.lab.kubernetes.kubeconfig == str(ROOT / "build" / "kubeapi" / "kubeconfig")
    assert three.lab.kubernetes.context == "gameday-testserver"
    assert three.nodes == inv.nodes
    # the driver creates it labelled as the lab labels its own namespace
    assert mf.namespace(three)["metadata"] == {
        "name": "gameday-lab-s3",
        "labels": {"gameday.io/lab": "kube-testserver-p3"},
        "annotations": {mf.CREATED_BY_ANNOTATION: "gameday"},
    }
    assert {o["metadata"].get("namespace") for o in lab_objects.all_manifests(three)} == {
        None,
        "gameday-lab-s3",
    }


def test_instance_k_keeps_a_relative_engine_program_where_the_inventory_is() -> None:
    """The real-vLLM inventory names its engine beside itself; instance k's copy lives in its
    state directory and must still start the same program."""
    real = load_inventory(LOCAL.parent / "local-realvllm.yaml")
    two = instance(real, 2)
    assert two.lab.engine_command == real.lab.engine_command
    assert two.lab.engine_command[0] == str(LOCAL.parent.parent / ".venv-vllm" / "bin" / "vllm")
    assert [n.address for n in two.nodes] == ["127.2.76.10"]


def test_a_kubernetes_instance_has_a_receiver_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every instance's Alertmanager delivers to the runner: to one address, instance j's
    receiver would take instance k's alerts. Instance k's listens on the given port + k."""
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    inv = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    listens = [instance(inv, k).lab.monitoring.receiver_listen for k in range(3)]  # type: ignore[union-attr]
    assert listens == ["127.0.79.1:9095", "127.0.79.1:9096", "127.0.79.1:9097"]
    webhooks = {
        yaml.safe_load(am_cm(instance(inv, k))["data"]["alertmanager.yml"])["receivers"][0][
            "webhook_configs"
        ][0]["url"]
        for k in range(3)
    }
    assert len(webhooks) == 3
