"""The docker-compose lab: images (build), the driver (Compose CLI + docker SDK) and host
actions (Ansible playbooks via ansible-runner).

Its registry entry is in kind.py, as every lab kind's.
"""
