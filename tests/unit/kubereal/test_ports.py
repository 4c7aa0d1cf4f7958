"""The control plane's ports: free, distinct, and never ones the kernel gives outgoing
connections where the ephemeral range leaves room outside it."""

from __future__ import annotations

import socket

import pytest

from tests.kubereal import cluster
from tests.kubereal.cluster import _ephemeral_range, free_port


def test_a_free_port_lies_outside_the_ephemeral_range_binds_and_is_not_given_twice() -> None:
    low, high = _ephemeral_range()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    for port in ports:
        assert not low <= port <= high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


@pytest.mark.parametrize("wide", [(1024, 65535), (10000, 65535), (20001, 65000)])
def test_a_range_that_leaves_no_room_falls_back_to_the_kernels_choice(
    monkeypatch: pytest.MonkeyPatch, wide: tuple[int, int]
) -> None:
    monkeypatch.setattr(cluster, "_ephemeral_range", lambda: wide)
    ports = {free_port() for _ in range(5)}
    assert len(ports) == 5 and all(0 < p < 65536 for p in ports)
