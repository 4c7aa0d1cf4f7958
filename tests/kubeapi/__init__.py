"""A stand-in Kubernetes API server (and kubelet) for the Kubernetes lab's tests."""
