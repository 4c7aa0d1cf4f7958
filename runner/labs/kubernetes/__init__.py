"""The Kubernetes lab: manifests from the inventory, a driver on the official client.

Its registry entry is in kind.py, as every lab kind's.
"""
