"""Planning changes: the engine's command line edited flag by flag, the DHCP plan, and what a
change says of itself."""

from __future__ import annotations

import pytest

from runner.labs.base import Change, ChangeKind, NodeConfig, ProcessState, Value
from runner.labs.common.planning import describe_change, dhcp_address, edit_args
from runner.spec.inventory import Node, Role


def test_edit_args() -> None:
    base = ["m", "--gpu-memory-utilization", "0.9", "--max-model-len", "4096", "--enforce-eager"]
    assert edit_args(base, {"--max-model-len": 16384}) == [
        "m",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "16384",
        "--enforce-eager",
    ]
    assert edit_args(base, {"--tensor-parallel-size": 2})[-2:] == ["--tensor-parallel-size", "2"]
    assert edit_args(base, {"--enforce-eager": None}) == base[:-1]
    assert edit_args(base, {"--max-model-len": None}) == [
        "m",
        "--gpu-memory-utilization",
        "0.9",
        "--enforce-eager",
    ]
    assert edit_args(["m", "--max-model-len=4096"], {"--max-model-len": 8}) == [
        "m",
        "--max-model-len",
        "8",
    ]


def _node(management: str | None) -> Node:
    return Node(
        name="node3", role=Role.WORKER, address="127.0.80.13", args=("m",),
        management_address=management,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("configured", "next_address"),
    [
        ("127.0.79.13", "127.0.79.23"),  # host number + 10
        ("10.0.0.244", "10.0.0.254"),  # the last host number
        ("10.0.0.245", "10.0.0.1"),  # past 254 it wraps to 1, never 0 or 255
        ("10.0.0.254", "10.0.0.10"),
    ],
)
def test_dhcp_hands_out_the_host_number_plus_ten(configured: str, next_address: str) -> None:
    assert dhcp_address(_node(configured), "management") == next_address


def test_a_node_without_an_address_on_the_network_is_refused() -> None:
    from runner.errors import LabError

    with pytest.raises(LabError, match="node node3 has no address on the management network"):
        dhcp_address(_node(None), "management")


def test_changes_describe_themselves() -> None:
    before = NodeConfig(args=("m", "--x", "1"), env={"A": "1", "B": "2"})
    after = NodeConfig(args=("m", "--x", "2"), env={"A": "1", "C": "3"})
    config = Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=before, after=after)
    assert describe_change(config) == "serving: args m --x 1 -> m --x 2; env set C=3; env unset B"
    start = Change(
        kind=ChangeKind.PROCESS,
        node="node1",
        subject="omniparser",
        before=ProcessState(running=False),
        after=ProcessState(running=True, command=("vllm-lab", "stray")),
    )
    assert describe_change(start) == "node1: start process omniparser (vllm-lab stray)"
    moved = Change(
        kind=ChangeKind.ADDRESS,
        node="node3",
        subject="management",
        before=Value(value="127.0.79.13"),
        after=Value(value="127.0.79.23"),
    )
    assert describe_change(moved) == "node3: management address 127.0.79.13 -> 127.0.79.23"
