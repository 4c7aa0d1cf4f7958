"""The watchdog's Prometheus metrics, in a registry of its own, served on a loopback port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client import Enum as StateEnum

from runner.watchdog.machine import Decision, WatchState


class WatchMetrics:
    def __init__(self, group: str) -> None:
        self.registry = CollectorRegistry()
        self.group = group
        self.state = StateEnum(
            "gameday_watchdog_state",
            "The watchdog's state for the group (1 on the current state).",
            ["group"],
            states=[s.value for s in WatchState],
            registry=self.registry,
        )
        self.restarts = Counter(
            "gameday_watchdog_restarts",
            "Whole-group restarts the watchdog made.",
            ["group"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "gameday_watchdog_decisions",
            "The watchdog's decisions, by decision.",
            ["group", "decision"],
            registry=self.registry,
        )
        self.last_probe_ok = Gauge(
            "gameday_watchdog_last_probe_ok",
            "1 if the last inference probe completed, 0 if it failed.",
            ["group"],
            registry=self.registry,
        )
        self.state.labels(group).state(WatchState.BOOTING.value)
        self.restarts.labels(group)
        for d in Decision:  # every series exists from the start, at 0
            self.decisions.labels(group, d.value)

    def record(self, state: WatchState, decision: Decision, probe_ok: bool | None) -> None:
        self.state.labels(self.group).state(state.value)
        self.decisions.labels(self.group, decision.value).inc()
        if decision is Decision.RESTART:
            self.restarts.labels(self.group).inc()
        if probe_ok is not None:
            self.last_probe_ok.labels(self.group).set(1 if probe_ok else 0)

    def serve(self, addr: str, port: int) -> int:
        """Serve /metrics on addr:port (port 0: any free one); the port it listens on."""
        server, _ = start_http_server(port, addr=addr, registry=self.registry)
        return int(server.server_port)
