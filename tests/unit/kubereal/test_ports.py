"""The control plane's ports: free, and never ones the kernel gives outgoing connections."""

from __future__ import annotations

import socket

from tests.kubereal.cluster import _ephemeral_range, free_port


def test_a_free_port_lies_outside_the_ephemeral_range_and_binds() -> None:
    low, high = _ephemeral_range()
    for _ in range(50):
        port = free_port()
        assert not low <= port <= high
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
