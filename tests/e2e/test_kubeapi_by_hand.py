"""The Kubernetes test server as docs/labs/kubernetes.md has a person start it: `python -m
tests.kubeapi` from the checkout with its relative defaults (build/kubeapi/kubeconfig, port
16443), then `gameday run` of the Kubernetes scenarios with `--lab
inventories/kube-testserver.yaml`, also from the checkout. Monitoring included: the scenarios
that use Prometheus (head-only-restart, stray-gpu-process) need its pod to find its volumes.
stray-gpu-process runs with the group pinned to its nodes, as docs/labs/kubernetes.md says it
must: unpinned, the stand-in's scheduler may return the restarted head to a free node away
from the stranger, where the shortcut restores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import ROOT, gameday, not_passed
from tests.support.kubecluster import pinned_inventory

pytestmark = [pytest.mark.e2e, pytest.mark.kube_standin("tests the stand-in's own command line")]

KUBERNETES = [
    "context-window-overflow",
    "head-only-restart",
    "kv-cache-shortage",
    "pd-kv-handshake",  # two more GPU nodes, the stand-in's default
    "service-name-collision",
    "tp-mismatch",
]
PINNED = "stray-gpu-process"


@pytest.fixture
def by_hand() -> Iterator[None]:
    """`python -m tests.kubeapi` in the checkout, nothing but the module named."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.kubeapi"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("kubeapi: serving http://127.0.0.1:16443"), line
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_the_seven_kubernetes_scenarios_pass_on_the_server_started_by_hand(
    by_hand: None, tmp_path: Path
) -> None:
    pinned = pinned_inventory(tmp_path, ROOT / "build" / "kubeapi" / "kubeconfig")
    runs = [
        (KUBERNETES, "inventories/kube-testserver.yaml"),
        ([PINNED], str(pinned)),
    ]
    for i, (ids, inventory) in enumerate(runs):
        files = [f"scenarios/{s}.yaml" for s in ids]
        p = gameday(
            "run",
            *files,
            "--lab",
            inventory,
            "--reports",
            str(tmp_path / f"reports-{i}"),
            "--json",
            cwd=ROOT,
            env={"GAMEDAY_STATE_DIR": str(tmp_path / "state")},
            timeout=900,
        )
        assert p.returncode == 0, not_passed(p)
        result = json.loads(p.stdout)
        assert {s["id"]: s["verdict"] for s in result["scenarios"]} == dict.fromkeys(ids, "passed")
