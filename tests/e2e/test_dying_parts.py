"""A part of the lab that dies ends the run in seconds, naming itself: the local lab with a
Prometheus (or an Alertmanager) that exits 1 at start, and the Kubernetes lab with a Prometheus
pod that crash-loops. The run ends `error` well before the 60 s its scrape wait allows, and the
console, report.md, result.json and junit.xml hold the part, its exit status and its last line.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import ROOT, gameday, variant
from tests.support.kubecluster import RealCluster, real_cluster

pytestmark = pytest.mark.e2e

LAST = "err: opening storage failed: lock DB directory: resource temporarily unavailable"


def _dying(tmp_path: Path, name: str) -> Path:
    """A program that prints what a Prometheus whose storage is locked prints, and exits 1."""
    prog = tmp_path / name
    prog.write_text(f"#!/bin/sh\necho 'level=info msg=starting'\necho '{LAST}' >&2\nexit 1\n")
    prog.chmod(0o755)
    return prog


def _reported(reports: Path, console: str) -> dict[str, object]:
    """The run's errored step: it names the part, exit status 1 and the last line in the
    console, report.md, result.json and junit.xml; its `died`."""
    assert " died: exited with status 1" in console, console
    assert LAST in console
    [run] = [d for d in reports.iterdir() if not d.is_symlink() and (d / "result.json").exists()]
    result = json.loads((run / "result.json").read_text())
    assert result["verdict"] == "error"
    died = [a for s in result["scenarios"] for a in s["assertions"] if "died" in a]
    assert died, result["scenarios"][0]["assertions"]
    step = died[0]
    assert step["verdict"] == "error" and step["died"]["exit_code"] == 1
    assert step["died"]["last_lines"][-1] == LAST
    md = (run / "report.md").read_text()
    assert "exited with status 1" in md and f"    {LAST}" in md
    junit = ET.parse(run / "junit.xml").getroot().find("testsuite/testcase/error")
    assert junit is not None and LAST in (junit.text or "")
    return dict(step["died"])


@pytest.mark.parametrize(
    ("key", "part"),
    [("prometheus_command", "Prometheus"), ("alertmanager_command", "Alertmanager")],
)
def test_a_local_monitoring_process_that_exits_at_start_ends_the_run_in_seconds(
    tmp_path: Path, lab_down_after: list[Path], key: str, part: str
) -> None:
    prog = _dying(tmp_path, "dies")
    listen = "prometheus_listen: 127.0.79.1:9090"
    inv = variant(
        ROOT / "inventories" / "local.yaml", tmp_path, {listen: f"{listen}\n        {key}: {prog}"}
    )
    lab_down_after.append(inv)
    reports = tmp_path / "reports"
    t0 = time.monotonic()
    p = gameday(
        "run",
        str(ROOT / "scenarios" / "dhcp-address-change.yaml"),
        "--lab",
        str(inv),
        "--reports",
        str(reports),
        env={"GAMEDAY_STATE_DIR": str(tmp_path / "state")},
        timeout=120,
    )
    took = time.monotonic() - t0
    assert p.returncode == 3, p.stdout + p.stderr
    assert took < 15, took
    died = _reported(reports, p.stdout + p.stderr)
    assert f"{part} died: exited with status 1" in p.stdout
    log = tmp_path / "state" / "local" / "services" / f"{part.lower()}.log"
    assert died["part"] == part and died["log"] == str(log)
    # `lab up` says the same, and takes down what it started
    t0 = time.monotonic()
    up = gameday("lab", "up", "--lab", str(inv), env={"GAMEDAY_STATE_DIR": str(tmp_path / "state")})
    assert up.returncode == 3 and time.monotonic() - t0 < 15, up.stderr
    said = " ".join(up.stderr.split())
    assert f"{part} died: exited with status 1" in said and LAST in said, up.stderr
    assert f"its whole output: {log}" in said


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """The real control plane and our kubelet, at the inventory's kubeconfig."""
    kubeconfig = ROOT / "build" / "kubeapi" / "kubeconfig"
    with real_cluster(tmp_path_factory.mktemp("kubereal"), kubeconfig) as cluster:
        yield cluster


@pytest.mark.kube_real
def test_a_crash_looping_prometheus_pod_ends_the_run_with_its_reason(
    server: RealCluster, tmp_path: Path
) -> None:
    prog = _dying(tmp_path, "prometheus")
    kubeconfig = str(ROOT / "build" / "kubeapi" / "kubeconfig")
    image = "        image: prom/prometheus:v2.53.1\n"
    inv = variant(
        ROOT / "inventories" / "kube-testserver.yaml",
        tmp_path,
        {
            "../build/kubeapi/kubeconfig": kubeconfig,
            image: f"{image}        prometheus_command: {prog}\n",
        },
    )
    reports = tmp_path / "reports"
    t0 = time.monotonic()
    p = gameday(
        "run",
        str(ROOT / "scenarios" / "stray-gpu-process.yaml"),
        "--lab",
        str(inv),
        "--reports",
        str(reports),
        env={"GAMEDAY_STATE_DIR": str(tmp_path / "state")},
        timeout=300,
    )
    took = time.monotonic() - t0
    assert p.returncode == 3, p.stdout + p.stderr
    died = _reported(reports, p.stdout + p.stderr)
    assert str(died["part"]).startswith("Prometheus (pod gameday-prometheus-")
    # seen as it ended (Error) or waits to start again (CrashLoopBackOff, restarted)
    assert died["reason"] in ("CrashLoopBackOff", "Error"), died
    print(f"the run took {took:.1f} s")
