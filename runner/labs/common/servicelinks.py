"""The environment variables the kubelet injects into a pod for each Service in its namespace
when `enableServiceLinks` is true (pkg/kubelet/envvars). Labs without Kubernetes inject the same
ones, and say so in the report."""

from __future__ import annotations

import hashlib


def cluster_ip(service: str) -> str:
    """A stable address in the EKS default service range 10.100.0.0/16."""
    h = hashlib.sha256(service.encode()).digest()
    return f"10.100.{h[0]}.{max(h[1], 1)}"


def kubernetes_service_env(
    service: str, ip: str, port: int, port_name: str = "http"
) -> dict[str, str]:
    """The Docker-links-style variables the kubelet injects for one Service
    (pkg/kubelet/envvars)."""
    name = service.upper().replace("-", "_")
    proto = "TCP"
    return {
        f"{name}_SERVICE_HOST": ip,
        f"{name}_SERVICE_PORT": str(port),
        f"{name}_SERVICE_PORT_{port_name.upper().replace('-', '_')}": str(port),
        f"{name}_PORT": f"tcp://{ip}:{port}",
        f"{name}_PORT_{port}_{proto}": f"tcp://{ip}:{port}",
        f"{name}_PORT_{port}_{proto}_PROTO": proto.lower(),
        f"{name}_PORT_{port}_{proto}_PORT": str(port),
        f"{name}_PORT_{port}_{proto}_ADDR": ip,
    }
