"""The helpers every lab driver shares (runner.labs.common.helpers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runner.errors import LabError
from runner.labs import lifecycle, open_lab
from runner.labs.base import ExitInfo, GpuProcess, LabDriver, LogLine, NodeConfig, NodeState
from runner.labs.common import helpers as common
from runner.labs.common.events import Incarnation
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LogSource, NodeStatus
from runner.spec.timing import TimeScale

ROOT = Path(__file__).resolve().parents[4]
T0 = datetime(2026, 4, 19, 1, 59, 54, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-04-19T01:59:54Z", T0),  # the kubelet's whole seconds
        ("2026-04-19T01:59:54.123456789Z", T0.replace(microsecond=123456)),  # Docker's ns
        ("2026-04-19T01:59:54.5+00:00", T0.replace(microsecond=500000)),  # the supervisor's
        ("2026-04-19T10:59:54.000001+09:00", T0.replace(microsecond=1)),
        ("2026-04-18T20:29:54-05:30", T0),
        ("2026-04-19T01:59:54", T0),  # no zone: UTC
    ],
)
def test_utc_time_reads_every_runtimes_stamp(text: str, expected: datetime) -> None:
    got = common.utc_time(text)
    assert got == expected
    assert got.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    ["", "2026-04-19 01:59:54", "2026-04-19T01:59Z", "Apr 19 01:59:54", "2026-13-01T00:00:00Z"],
)
def test_utc_time_refuses_what_is_no_rfc3339_stamp(text: str) -> None:
    with pytest.raises(ValueError):
        common.utc_time(text)


def test_stamped_lines_keep_the_text_and_drop_unstamped_lines() -> None:
    text = "2026-04-19T01:59:54Z INFO  two  spaces\nno stamp here\n2026-04-19T01:59:55.25Z \n"
    assert common.stamped_lines(text) == [
        LogLine(ts=T0, text="INFO  two  spaces"),
        LogLine(ts=T0.replace(second=55, microsecond=250000), text=""),
    ]


@pytest.mark.parametrize(
    ("restart", "delay"),
    [(0, 10.0), (1, 20.0), (2, 40.0), (3, 80.0), (4, 160.0), (5, 300.0), (6, 300.0), (5000, 300.0)],
)
def test_crash_loop_backoff_is_the_kubelets(restart: int, delay: float) -> None:
    assert lifecycle.crash_loop_backoff_s(restart) == delay


def test_gpu_processes_of_smi_json() -> None:
    out = (
        '{"gpu": "NVIDIA A10G", "memory_mib": 23028, "used_mib": 21505, "processes": '
        '[{"pid": 41, "name": "vllm-lab serve", "mib": 20480}, '
        '{"pid": 77, "name": "omniparser", "mib": 1025}]}\n'
    )
    assert common.gpu_processes_of(out) == [
        GpuProcess(pid=41, name="vllm-lab serve", mib=20480),
        GpuProcess(pid=77, name="omniparser", mib=1025),
    ]
    assert common.gpu_processes_of('{"processes": []}') == []


@pytest.mark.parametrize(
    "out",
    [
        "",
        "not json",
        '{"gpu": "A10G"}',
        '{"processes": [{"pid": 1, "name": "x"}]}',
        '{"processes": [{"pid": "one", "name": "x", "mib": 1}]}',
        '{"processes": [{"pid": 1, "name": "x", "mib": 1, "user": "root"}]}',
    ],
)
def test_gpu_processes_of_anything_else_is_a_lab_error(out: str) -> None:
    with pytest.raises(LabError, match="gave no process list"):
        common.gpu_processes_of(out)


def test_state_dir_is_the_labs_own_else_under_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = load_inventory(ROOT / "inventories" / "local.yaml").lab
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path / "root"))
    assert common.state_dir(lab) == tmp_path / "root" / "local"
    own = lab.model_copy(update={"state_dir": str(tmp_path / "own")})
    assert common.state_dir(own) == tmp_path / "own"
    monkeypatch.delenv("GAMEDAY_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert common.state_dir(lab) == tmp_path / "xdg" / "gameday" / "local"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert common.state_root() == tmp_path / "home" / ".local" / "state" / "gameday"


def _inc(number: int, started: int, finished: int | None = None, code: int | None = None) -> Any:
    inc = Incarnation(number, f"c{number}", T0 + timedelta(seconds=started))
    if finished is not None:
        inc.finished_at = T0 + timedelta(seconds=finished)
        inc.code = code
    return inc


def test_node_state_of_the_recorded_incarnations() -> None:
    incs = [_inc(1, 0, 5, 1), _inc(2, 6, 9, 137), _inc(3, 10)]
    incs[2].first_output_at = T0 + timedelta(seconds=11)
    st = common.node_state(
        "serving", NodeStatus.RUNNING, generation=2, restarts=2, ready=True, reason="",
        current=incs[2], incarnations=incs, pid=4242,
    )  # fmt: skip
    assert st == NodeState(
        name="serving",
        status=NodeStatus.RUNNING,
        generation=2,
        incarnation=3,
        restarts=2,
        ready=True,
        pid=4242,
        started_at=T0 + timedelta(seconds=10),
        first_output_at=T0 + timedelta(seconds=11),
        reason="",
        last_exit=ExitInfo(
            incarnation=2,
            code=137,
            started_at=T0 + timedelta(seconds=6),
            first_output_at=None,
            finished_at=T0 + timedelta(seconds=9),
        ),
    )


def test_node_state_without_a_current_incarnation_and_not_running() -> None:
    incs = [_inc(1, 0, 5, 1), _inc(2, 6)]
    st = common.node_state(
        "node1", NodeStatus.CRASH_LOOPING, generation=1, restarts=1, ready=True,
        reason="CrashLoopBackOff", current=None, incarnations=incs,
    )  # fmt: skip
    assert (st.incarnation, st.ready, st.started_at, st.pid) == (2, False, None, None)
    assert st.last_exit is not None and st.last_exit.incarnation == 1
    assert common.node_state(
        "node1", NodeStatus.PENDING, generation=0, restarts=0, ready=False, reason="",
        current=None, incarnations=[],
    ).incarnation == 0  # fmt: skip


def test_pending() -> None:
    assert common.pending("node2", 3, "no pod") == NodeState(
        name="node2",
        status=NodeStatus.PENDING,
        generation=3,
        incarnation=0,
        restarts=0,
        ready=False,
        reason="no pod",
    )


def test_moved_addresses() -> None:
    configured = {"node1": {"management": "10.0.0.11", "overlay": "10.1.0.1"}, "node2": {}}
    actual = {"node1": {"management": "10.0.0.99"}, "node3": {"management": "10.0.0.13"}}
    assert common.moved_addresses(configured, actual) == [
        "node1: management address moved to 10.0.0.99",
        "node1: not on the overlay network",
    ]
    assert common.moved_addresses(configured, configured) == []


def _state(name: str, ready: bool, status: NodeStatus = NodeStatus.RUNNING) -> NodeState:
    return NodeState(name=name, status=status, generation=1, incarnation=1, restarts=0, ready=ready)


class _Lab:
    """Just what common.leftovers and LabDriver.logs read of a driver."""

    def __init__(self) -> None:
        self.inventory = SimpleNamespace(
            nodes=[SimpleNamespace(name="a"), SimpleNamespace(name="b")]
        )
        self.configs = {"a": NodeConfig(args=("--x",), env={}), "b": NodeConfig(args=(), env={})}
        self.read: list[tuple[str, int]] = []
        self.last_exit: ExitInfo | None = None

    def config(self, node: str) -> NodeConfig:
        return self.configs[node]

    def baseline_config(self, node: str) -> NodeConfig:
        return NodeConfig(args=(), env={})

    def states(self) -> dict[str, NodeState]:
        b = _state("b", False, NodeStatus.CRASH_LOOPING).model_copy(
            update={"incarnation": 4, "last_exit": self.last_exit}
        )
        return {"a": _state("a", True), "b": b}

    def logs_of(self, node: str, incarnation: int) -> list[LogLine]:
        self.read.append((node, incarnation))
        return [LogLine(ts=T0, text=f"{node} {incarnation}")]


def test_leftovers_are_drift_then_the_drivers_own_then_nodes_not_serving() -> None:
    lab: Any = _Lab()
    assert common.leftovers(lab, ["a: process omniparser the lab did not start"]) == [
        "a: engine config differs from the baseline",
        "a: process omniparser the lab did not start",
        "b: not serving (crash_looping)",
    ]
    assert common.leftovers(lab, [], config="deployment")[0] == (
        "a: deployment differs from the baseline"
    )


def test_logs_current_and_previous() -> None:
    lab: Any = _Lab()
    assert LabDriver.logs(lab, "b", LogSource.CURRENT) == [LogLine(ts=T0, text="b 4")]
    assert LabDriver.logs(lab, "b", LogSource.PREVIOUS) == []  # nothing exited yet
    lab.last_exit = ExitInfo(
        incarnation=3, code=1, started_at=T0, first_output_at=None, finished_at=T0
    )
    assert LabDriver.logs(lab, "b", LogSource.PREVIOUS) == [LogLine(ts=T0, text="b 3")]
    assert lab.read == [("b", 4), ("b", 3)]


def test_scrape_drift() -> None:
    local = load_inventory(ROOT / "inventories" / "local.yaml")
    assert common.scrape_drift(local, "management") == []
    assert common.scrape_drift(local, "overlay") == ["Prometheus scrapes the overlay network"]
    bare = local.model_copy(update={"lab": local.lab.model_copy(update={"monitoring": None})})
    assert common.scrape_drift(bare, "overlay") == []


def test_boot_timeout_through_the_time_scale() -> None:
    lab = load_inventory(ROOT / "inventories" / "compose.yaml").lab  # x100, 1800 s, 0.3 s
    scale = TimeScale.of(lab)
    assert scale == TimeScale(100, 0.3)
    assert scale.boot_timeout_lab(lab) == 18.0


@pytest.mark.parametrize(
    ("inventory", "driver"),
    [
        ("local.yaml", "LocalLab"),
        ("compose.yaml", "ComposeLab"),
        ("kube-testserver.yaml", "KubernetesLab"),
    ],
)
def test_open_lab_has_a_driver_for_every_lab_kind(inventory: str, driver: str) -> None:
    lab = open_lab(load_inventory(ROOT / "inventories" / inventory))
    assert type(lab).__name__ == driver
