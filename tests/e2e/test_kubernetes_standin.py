"""The Kubernetes tests that still run against the stand-in (tests/kubeapi), each saying why.

stray-gpu-process: its first recovery step (disable DeepGEMM, restart the group) is expected
NOT to restore service, because the stranger still holds the head's GPU. That holds where the
restarted head comes back to the same GPU, as on the local and compose labs and on the
stand-in's scheduler (first free node in order). The real kube-scheduler scores the stray pod's
node as the more allocated one (it requests CPU and memory) and, with the group's other GPUs just
freed, places the new head elsewhere: there the step restores, and the scenario's claim fails.
On a real cluster that is what a group restart does, so the scenario needs to say what it
claims on Kubernetes before it can run on the real scheduler.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import test_kubernetes_lab as kube_lab
from tests.kubeapi.server import Server
from tests.support.cli import ROOT, gameday

STRAY_WHY = (
    "the real scheduler puts the restarted head on another free GPU node, away from the stray "
    "pod, so recover 1 restores (see the module's docstring)"
)
pytestmark = pytest.mark.e2e
INVENTORY = kube_lab.INVENTORY
state = kube_lab.state


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server(0, kube_lab.KUBECONFIG, time_scale=100).start()  # the inventory's kubeconfig
    yield srv
    srv.stop()


@pytest.mark.kube_standin(STRAY_WHY)
def test_stray_gpu_process_on_the_stand_in(server: Server, state: Path, tmp_path: Path) -> None:
    files = [str(ROOT / "scenarios" / "stray-gpu-process.yaml")]
    r = gameday(
        "run",
        *files,
        "--lab",
        str(INVENTORY),
        "--reports",
        str(tmp_path),
        "--json",
        timeout=900,
        env={"GAMEDAY_STATE_DIR": str(state)},
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    gpu: dict[str, Any] = json.loads(r.stdout)["scenarios"][0]
    timeline = " | ".join(e["event"] for e in gpu["timeline"])
    assert "node1: omniparser holds GPU memory" in timeline
    assert gpu["verdict"] == "passed", [a for a in gpu["assertions"] if a["verdict"] != "passed"]
