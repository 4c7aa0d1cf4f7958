"""Runtime failures of the 4-node tensor-parallel group, with the lab's real Prometheus."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest

from runner.labs.common import planning
from runner.labs.local.driver import LocalLab
from runner.results.schema import Verdict
from runner.run.probing import ProbeEnv, run_probe
from runner.spec.inventory_load import load_inventory
from runner.spec.probes import HttpProbe, InferenceProbe
from tests.support.cli import ROOT, gameday, ok, scenario_variant

pytestmark = pytest.mark.e2e
THREE = [
    "scenarios/head-only-restart.yaml",
    "scenarios/stray-gpu-process.yaml",
    "scenarios/dhcp-address-change.yaml",
]


XID = "scenarios/gpu-xid-error.yaml"


def test_the_three_and_gpu_xid_pass(tmp_path: Path) -> None:
    p = gameday("run", *THREE, XID, "--lab", "inventories/local.yaml", "--reports", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(next(tmp_path.glob("*/result.json")).read_text())
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert {s["verdict"] for s in by_id.values()} == {"passed"}
    for s in by_id.values():
        assert s["time_to_detect_s"] is not None  # each names the alert that must fire
        assert any("alert" in e["event"] and "firing" in e["event"] for e in s["timeline"])
    stray = by_id["stray-gpu-process"]
    titles = [e["title"] for e in stray["evidence"]]
    assert "GPU processes on node1 at the failure" in titles
    gpu = next(
        e for e in stray["evidence"] if e["title"] == "GPU processes on node1 at the failure"
    )
    assert any("omniparser" in ln["text"] for ln in gpu["lines"])
    # the GPU's XID: the kernel log's line through the seeds' watch, the alert it pages with
    # (delivered, the reset in its procedure), the engine's CUDA error, and the restart without
    # the reset failing at the worker's first CUDA call
    xid = {a["name"]: a for a in by_id["gpu-xid-error"]["assertions"]}
    assert (
        xid['expect: PromQL node_kernel_log_nvrm_xid_lines{node="node1", xid="79"}']["observed"]
        == "1"
    )
    assert "reset its GPU" in xid["detect: alert GpuXidError delivered"]["observed"]
    sig = next(v for k, v in xid.items() if k.startswith("expect: signature 2/4"))
    assert "torch.AcceleratorError: CUDA error: unspecified launch failure" in sig["observed"]
    shortcut = [a for k, a in xid.items() if k.startswith("recover 1: ")]
    assert {a["verdict"] for a in shortcut} == {"passed"}
    assert any("in init_device" in a["observed"] for a in shortcut)
    dhcp = by_id["dhcp-address-change"]
    targets = next(e for e in dhcp["evidence"] if e["title"].startswith("Prometheus targets"))
    assert sum(ln["highlight"] for ln in targets["lines"]) == 2  # node3, node4 down
    head = by_id["head-only-restart"]
    names = {a["name"]: a for a in head["assertions"]}
    assert names["expect: exit code"]["observed"] == "exit code 0"
    assert any(n.startswith("expect on node2: within") for n in names)
    # delivered through Alertmanager to the runner's receiver, with the DeepGEMM crash
    # write-up's annotations
    for s, alert, text in (
        (head, "ServingDown", "restart all four together"),
        (dhcp, "ExporterTargetDown", "stable overlay addresses"),
    ):
        got = {a["name"]: a for a in s["assertions"]}[f"detect: alert {alert} delivered"]
        assert got["verdict"] == "passed", got
        assert f"{alert} firing received" in got["observed"] and text in got["observed"]
        assert any(e["event"].startswith(f"alert {alert} delivered") for e in s["timeline"])


def test_shortcuts_and_expectations_fail_on_purpose(tmp_path: Path) -> None:
    files = [
        # the DeepGEMM crash write-up's shortcut claimed to work: restarting the head alone
        scenario_variant(
            tmp_path,
            THREE[0],
            "head-alone-restores",
            ("    outcome: does_not_restore\n", "    outcome: restores\n"),
            ("time_to_recover: {max_s: 1800}", "time_to_recover: {max_s: 400}"),
        ),
        # the exit code a restart policy would have seen
        scenario_variant(tmp_path, THREE[0], "head-exits-1", ("exit_code: 0", "exit_code: 1")),
        # the lever that hides the symptom claimed to be the fix
        scenario_variant(
            tmp_path,
            THREE[1],
            "deepgemm-off-restores",
            ("    outcome: does_not_restore\n", "    outcome: restores\n"),
            ("time_to_recover: {max_s: 1800}", "time_to_recover: {max_s: 400}"),
        ),
        # the wrong nodes expected blind, and an alert window shorter than the rule's for: 10m
        scenario_variant(
            tmp_path,
            THREE[2],
            "dhcp-wrong-nodes",
            (
                "up: [node1, node2], down: [node3, node4]",
                "up: [node3, node4], down: [node1, node2]",
            ),
        ),
        scenario_variant(
            tmp_path,
            THREE[2],
            "dhcp-alert-too-soon",
            ("      within_s: 720  # for: 10m", "      within_s: 120  # for: 10m"),
        ),
    ]
    p = gameday(
        "run", *map(str, files), "--lab", "inventories/local.yaml", "--reports", str(tmp_path / "r")
    )
    assert p.returncode == 1, p.stdout + p.stderr
    out = p.stdout
    assert "Traceback" not in out + p.stderr
    assert re.search(
        r"FAILED head-alone-restores: recover 1: .*: restores service\s+expected: "
        r"ready, then every verification probe passes\s+observed: not restored",
        out,
    )
    assert re.search(
        r"FAILED head-exits-1: expect: exit code\s+expected: exit code 1\s+"
        r"observed: exit code 0",
        out,
    )
    assert re.search(r"FAILED deepgemm-off-restores: recover 1: .*: restores service", out)
    assert re.search(
        r"FAILED dhcp-wrong-nodes: expect: Prometheus targets of node-exporter\s+"
        r"expected: up: node3, node4; down: node1, node2\s+observed: node1 up; "
        r"node2 up; node3 down",
        out,
    )
    assert re.search(
        r"FAILED dhcp-alert-too-soon: detect: alert ExporterTargetDown fires\s+"
        r"expected: firing within 120 s real",
        out,
    )
    result = json.loads(next((tmp_path / "r").glob("*/result.json")).read_text())
    assert {s["verdict"] for s in result["scenarios"]} == {"failed"}


@pytest.fixture
def lab() -> LocalLab:
    inv = load_inventory(ROOT / "inventories" / "local.yaml")
    driver = LocalLab(inv)
    assert gameday("lab", "up").returncode == 0
    yield driver
    ok(gameday("lab", "down"))


def test_worker_hang_keeps_health_200(lab: LocalLab) -> None:
    """A stopped worker: the head still answers /health 200, but a completion never returns."""
    with httpx.Client() as http:
        env = ProbeEnv(http=http, lab=lab, scale=100, target="node1")
        ok = run_probe(env, InferenceProbe(kind="inference", prompt="hello", max_tokens=64))
        assert ok.verdict is Verdict.PASSED
        # a hang is SIGSTOP, which the scenario format's signals leave out: sent to the engine's
        # main process, the one the lab's state names
        pid = lab.states()["node2"].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            health = run_probe(env, HttpProbe(kind="http", path="/health"))
            hang = run_probe(
                env,
                InferenceProbe(
                    kind="inference",
                    prompt="hello again",
                    max_tokens=8,
                    expect="hangs",
                    timeout_s=200,
                ),
            )
        finally:
            os.kill(pid, signal.SIGCONT)
        assert health.verdict is Verdict.PASSED, health
        assert hang.verdict is Verdict.PASSED and "a hang" in hang.observed, hang
        # an error is not a hang: a node that refuses connections fails `hangs`
        refused = run_probe(
            ProbeEnv(http=http, lab=lab, scale=100, target="node2"),
            InferenceProbe(kind="inference", prompt="x", expect="hangs"),
        )
        assert refused.verdict is Verdict.FAILED and "refused" in refused.observed


def _lab_pids(lab: LocalLab) -> set[int]:
    pids: set[int] = set()
    for st in lab.states().values():
        if st.pid:
            pids.add(st.pid)
            kids = Path(f"/proc/{st.pid}/task/{st.pid}/children")
            if kids.exists():
                pids |= {int(x) for x in kids.read_text().split()}
    for procs in lab.aux_processes().values():
        pids |= {p["pid"] for p in procs.values() if p["pid"]}
    return pids


def test_lab_down_leaves_no_process(lab: LocalLab) -> None:
    change = planning.start_process(lab, "node1", "omniparser", ["vllm-lab", "stray"])
    lab.apply(change)
    time.sleep(0.3)
    pids = _lab_pids(lab)
    # 5 engines + 5 engine cores (workers have none: 2 + 3) + 4 exporters + Prometheus + stray
    assert len(pids) >= 5 + 2 + 4 + 1 + 1, pids
    assert gameday("lab", "down").returncode == 0
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            # a zombie has exited; init collects its status, in its own time
            if state != "Z":
                alive.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
        except (FileNotFoundError, ProcessLookupError):
            pass
    assert alive == []


def test_prometheus_not_installed(tmp_path: Path) -> None:
    text = (
        (ROOT / "inventories" / "local.yaml")
        .read_text()
        .replace(
            "prometheus_listen: 127.0.79.1:9090",
            "prometheus_listen: 127.0.79.1:9090\n        prometheus_command: no-such-prometheus",
        )
    )
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    p = gameday("lab", "up", "--lab", str(inv))
    assert p.returncode == 3
    assert "no-such-prometheus" in p.stderr and "apt-get install -y prometheus" in p.stderr
    assert "Traceback" not in p.stderr
    assert not LocalLab(load_inventory(inv)).is_up()


def test_scrape_on_unknown_lab_network_is_refused(lab: LocalLab) -> None:
    from runner.errors import LabError

    with pytest.raises(LabError, match="no address on the wifi network"):
        planning.set_address(lab, "node3", "wifi", "127.0.80.99")
    _ = signal  # (imported for the hang test's readers)


def test_a_node_that_never_joins(tmp_path: Path) -> None:
    """A worker pointed at the wrong rendezvous port: the head waits forever; `lab up` says which
    nodes are not ready, exits 3, and leaves nothing running."""
    text = (ROOT / "inventories" / "local.yaml").read_text()
    text = text.replace("boot_timeout_s: 1800", "boot_timeout_s: 400")
    bad = (
        '--nnodes, "4", --node-rank, "3", --master-addr, 127.0.81.1,\n'
        '                                    --master-port, "29501"'
    )
    assert bad in text
    text = text.replace(bad, bad.replace('"29501"', '"29599"'))
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    p = gameday("lab", "up", "--lab", str(inv))
    assert p.returncode == 3, p.stderr
    assert "not every node is ready" in p.stderr and "node1=running" in p.stderr
    assert "Traceback" not in p.stderr
    assert not LocalLab(load_inventory(inv)).is_up()
