"""What the lab drivers share: driver helpers, the event feed, change planning, addresses,
Service links, the Prometheus and Alertmanager configuration, and Ansible helpers.
"""
