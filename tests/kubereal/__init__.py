"""A real Kubernetes control plane (v1.20 from Debian's archive) for the Kubernetes lab's tests."""
