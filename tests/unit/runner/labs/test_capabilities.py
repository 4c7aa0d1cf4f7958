"""A scenario that needs what its lab lacks is "not on this lab", with why, before it runs."""

from __future__ import annotations

from pathlib import Path

from runner.labs.base import Capability
from runner.labs.capabilities import lacking, needs
from runner.spec.scenario import load_scenario
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag

ROOT = Path(__file__).resolve().parents[4]


def test_each_shipped_scenario_needs_exactly_what_it_uses() -> None:
    got = {
        p.stem: sorted(n.capability.value for n in needs(load_scenario(p).scenario))
        for p in sorted((ROOT / "scenarios").glob("*.yaml"))
    }
    assert got == {
        "context-window-overflow": [],
        "cuda-graph-capture-oom": [],
        "dhcp-address-change": ["addresses", "alert_delivery", "monitoring"],
        "engine-core-death": ["signals"],
        "engine-core-hang": ["signals"],
        "gpu-xid-error": ["alert_delivery", "monitoring", "processes"],
        "head-only-restart": ["alert_delivery", "monitoring", "signals"],
        "kv-cache-shortage": [],
        "lora-rank-over-max": [],
        "missing-chat-template": [],
        "nccl-watchdog-timeout": ["signals"],
        "pd-kv-handshake": [],
        "service-name-collision": [],
        "silent-wrong-output": [],
        "stray-gpu-process": ["gpu_processes", "monitoring", "processes"],
        "tp-head-divisibility": [],
        "tp-mismatch": [],
    }


def test_a_lab_without_exec_says_which_step_needs_it(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["inject"] = [
        {"kind": "signal", "node": "serving", "process": "engine_core", "signal": "KILL"}
    ]
    run = fake_run(
        tmp_path, doc, wrong_flag(), capabilities=frozenset(Capability) - {Capability.SIGNALS}
    )
    assert lacking(run.ls.scenario, run.lab) == [
        "not on this lab: the fake lab cannot signal a process inside a node (exec), which "
        "inject[0] (signal) needs"
    ]
    full = fake_run(tmp_path / "full", doc, wrong_flag())
    assert lacking(full.ls.scenario, full.lab) == []


def test_alerts_need_monitoring(tmp_path: Path) -> None:
    doc = scenario_doc(detect={"alerts": [{"name": "ServingDown", "within_s": 60}]})
    run = fake_run(tmp_path, doc, capabilities=frozenset())
    assert lacking(run.ls.scenario, run.lab) == [
        "not on this lab: the fake lab cannot run the lab's Prometheus, which detect.alerts needs"
    ]


def test_delivery_on_kubernetes_needs_a_receiver_address_the_pods_reach() -> None:
    """The receiver's default address is on the runner's machine: no pod of a real cluster
    reaches it, so a Kubernetes lab delivers only with monitoring.receiver_listen set."""
    from runner.labs.kubernetes.driver import KubernetesLab
    from runner.spec.inventory_load import load_inventory

    head = load_scenario(ROOT / "scenarios" / "head-only-restart.yaml").scenario
    eks = KubernetesLab(load_inventory(ROOT / "inventories" / "eks.yaml"))
    assert Capability.ALERT_DELIVERY not in eks.capabilities
    assert "detect.alerts[0] (delivered)" in " ".join(lacking(head, eks))
    assert "receiver_listen" in " ".join(lacking(head, eks))
    test = KubernetesLab(load_inventory(ROOT / "inventories" / "kube-testserver.yaml"))
    assert Capability.ALERT_DELIVERY in test.capabilities
    assert not [r for r in lacking(head, test) if "deliver" in r]


def test_a_scenario_about_a_restart_policy_is_not_run_on_a_target_that_restarts_otherwise(
    tmp_path: Path,
) -> None:
    from runner.labs.local.driver import LocalLab
    from runner.spec.inventory_load import load_inventory

    death = load_scenario(ROOT / "scenarios" / "engine-core-death.yaml").scenario
    always = LocalLab(load_inventory(ROOT / "inventories" / "local.yaml"))
    assert lacking(death, always) == [
        "not on this lab: serving restarts by policy always, and the scenario is about a node "
        "whose policy is on-failure (target_restart)"
    ]
    on_failure = LocalLab(load_inventory(ROOT / "inventories" / "local-realvllm.yaml"))
    assert lacking(death, on_failure) == []
    # a scenario that names no policy runs on either
    kv = load_scenario(ROOT / "scenarios" / "kv-cache-shortage.yaml").scenario
    assert lacking(kv, always) == lacking(kv, on_failure) == []
