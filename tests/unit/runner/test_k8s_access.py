"""The Kubernetes lab's reach into and beside its pods: the GPU list's parsing, the stray pod's
shape, the capabilities an inventory gives the lab."""

from __future__ import annotations

import pytest

from runner.errors import LabError
from runner.labs.base import Capability, GpuProcess
from runner.labs.kubernetes import stray
from runner.labs.kubernetes.adopt import AdoptedKubernetesLab
from runner.labs.kubernetes.driver import KubernetesLab
from runner.labs.kubernetes.podexec import nvidia_smi_processes
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT

INVENTORY = ROOT / "inventories" / "kube-testserver.yaml"


def test_nvidia_smi_rows_are_read_names_with_commas_included() -> None:
    csv = "4120, VLLM::Worker_TP0, 21544\n77, /omniparser/venv/bin/python, a.py, 1417\n\n"
    assert nvidia_smi_processes(csv) == [
        GpuProcess(pid=4120, name="VLLM::Worker_TP0", mib=21544),
        GpuProcess(pid=77, name="/omniparser/venv/bin/python, a.py", mib=1417),
    ]
    assert nvidia_smi_processes("") == []


def test_an_nvidia_smi_row_that_is_not_one_is_refused() -> None:
    with pytest.raises(LabError, match="not pid, name, MiB: 'No devices were found'"):
        nvidia_smi_processes("No devices were found\n")


def test_the_stray_pod_asks_for_no_gpu_but_sees_them_all() -> None:
    inv = load_inventory(INVENTORY)
    pod = stray.stray_pod(inv, "OmniParser v2", "gameday-testserver-gpu-2", ["vllm-lab", "stray"])
    assert pod["metadata"]["name"] == "stray-omniparser-v2"
    assert pod["metadata"]["labels"] == {
        "gameday.io/lab": "kube-testserver",
        "app.kubernetes.io/managed-by": "gameday",
        "gameday.io/stray": "stray-omniparser-v2",
    }
    spec = pod["spec"]
    assert (spec["nodeName"], spec["restartPolicy"]) == ("gameday-testserver-gpu-2", "Never")
    [c] = spec["containers"]
    assert c["env"][0] == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}}
    assert "nvidia.com/gpu" not in str(c["resources"])
    assert c["command"] == ["vllm-lab", "stray"]
    with pytest.raises(LabError, match="cannot name a pod"):
        stray.pod_name("---")


def test_capabilities_follow_the_inventory() -> None:
    inv = load_inventory(INVENTORY)
    lab = KubernetesLab(inv)
    assert Capability.SIGNALS in lab.capabilities
    assert Capability.GPU_PROCESSES in lab.capabilities
    assert Capability.PROCESSES in lab.capabilities
    assert Capability.ADDRESSES not in lab.capabilities
    has_monitoring = inv.lab.monitoring is not None
    assert (Capability.MONITORING in lab.capabilities) is has_monitoring
    assert AdoptedKubernetesLab.capabilities.fget(lab) == frozenset(  # type: ignore[attr-defined]
        {Capability.SERVICE_LINKS}
    )


def test_the_stray_program_is_the_lab_engines_or_a_torch_holder_in_vllms_image() -> None:
    lab_cmd = ("vllm-lab", "stray", "--name", "/omniparser/venv/bin/python", "--mib", "900")
    inv = load_inventory(INVENTORY)
    assert stray.command_for(inv, lab_cmd) == lab_cmd
    eks = load_inventory(ROOT / "inventories" / "eks.yaml")
    assert eks.lab.engine_command == ("vllm", "serve")
    assert stray.command_for(eks, lab_cmd) == ("python3", "-c", stray.TORCH_HOLDER, "900")
    [pod] = stray.scenario_manifests(eks)
    assert pod["metadata"]["name"] == "stray-omniparser"
    assert pod["spec"]["containers"][0]["command"][-1] == "1417"
    compile(stray.TORCH_HOLDER, "holder", "exec")  # it is Python


def test_lab_manifests_prints_the_scenario_objects_on_request() -> None:
    import yaml
    from click.testing import CliRunner

    from runner.cli.main import main

    inv = ROOT / "inventories" / "kube-testserver.yaml"
    r = CliRunner().invoke(main, ["lab", "manifests", "--scenario-objects", "--lab", str(inv)])
    assert r.exit_code == 0, r.output
    assert list(yaml.safe_load_all(r.stdout)) == stray.scenario_manifests(load_inventory(inv))
    plain = CliRunner().invoke(main, ["lab", "manifests", "--lab", str(inv)])
    assert "stray-omniparser" not in plain.stdout  # `lab up` does not create it
