"""The Kubernetes lab: manifests from the inventory, a driver on the official client."""
