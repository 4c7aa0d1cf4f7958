"""How the compose lab moves one inventory value to instance k (runner.labs.compose.instance)."""

from __future__ import annotations

import pytest

from runner.labs.compose.instance import _Mover
from runner.spec.inventory import ComposeSpec

SPEC = ComposeSpec(
    project="gameday-compose",
    subnets={"management": "172.30.80.0/24", "overlay": "172.30.81.0/24"},
)


@pytest.mark.parametrize(
    ("k", "value", "moved"),
    [
        (1, "172.30.81.1", "172.30.83.1"),  # an address on a lab network (--master-addr)
        (1, "172.30.80.13", "172.30.82.13"),
        (3, "172.30.81.4", "172.30.87.4"),
        (1, "172.30.79.1", "172.30.79.1"),  # not one of the lab's networks
        (1, "127.0.0.1:18000", "127.0.0.1:18100"),  # a published port
        (2, "127.0.0.1:19090", "127.0.0.1:19290"),
        (2, "http://127.0.0.1:19090/", "http://127.0.0.1:19290/"),  # prometheus_url
        (1, "http://172.30.81.1:8000/v1", "http://172.30.83.1:8000/v1"),  # not published
        (1, "0.0.0.0", "0.0.0.0"),
        (1, "gameday-compose-node3-host", "gameday-compose-p1-node3-host"),  # ansible_host
        (1, "0.9", "0.9"),
        (1, "--master-addr", "--master-addr"),
        (1, "Qwen/Qwen2.5-14B-Instruct-AWQ", "Qwen/Qwen2.5-14B-Instruct-AWQ"),
        (1, 8000, 8000),
    ],
)
def test_one_value_moves_to_instance_k(k: int, value: object, moved: object) -> None:
    assert _Mover(SPEC, k)(value) == moved


def test_containers_move_through_lists_and_mappings() -> None:
    move = _Mover(SPEC, 1)
    assert move({"args": ["--master-addr", "172.30.81.1"], "env": {"A": "172.30.80.1"}}) == {
        "args": ["--master-addr", "172.30.83.1"],
        "env": {"A": "172.30.82.1"},
    }
