"""The lab's Prometheus configuration, the same for every lab kind: scrape every engine's
/metrics (job `vllm`) and every node's node-exporter by its address on one network (job
`node-exporter`), with the DeepGEMM crash write-up's alert rules; intervals and `for:` scaled by
the time scale."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from runner.errors import LabError
from runner.labs.base import PartDeath, PartDied
from runner.labs.common.alertmanager_config import prometheus_alerting
from runner.spec.inventory import Inventory, Monitoring, Role
from runner.spec.monitoring_defaults import AlertRule

# The label every alert of a lab's Prometheus carries to Alertmanager (its `external_labels`):
# the lab's name, `<name>-p<k>` for an instance of `--parallel`, so that the runner's receiver
# tells its own lab's alerts from any other's.
LAB_LABEL = "gameday_lab"

# One client for every look at Prometheus: a new one per call builds a TLS context (the CA
# bundle read and parsed, ~5 ms of CPU), and wait_scraped looks every 50 ms. httpx clients are
# thread-safe.
_HTTP = httpx.Client(timeout=1, trust_env=False)


def write_prometheus(
    pdir: Path,
    inventory: Inventory,
    exporter_network: str,
    addresses: dict[str, dict[str, str]],
    *,
    vllm_hosts: dict[str, str] | None = None,
    rules_path: str | None = None,
    alertmanager: str | None = None,
) -> None:
    """Write prometheus.yml, rules.yml and the `scrape_network` marker into `pdir`.

    `addresses`: each node's address by network (what a static config names). `vllm_hosts`:
    the host to scrape each engine at (default: the node's own address). `rules_path`: where
    Prometheus sees rules.yml (a container mounts `pdir` elsewhere). `alertmanager`: host:port
    Prometheus sends its alerts to (none: the alerts only fire)."""
    mon = inventory.lab.monitoring
    assert mon is not None
    pdir.mkdir(parents=True, exist_ok=True)
    scale = inventory.lab.time_scale
    interval = scrape_interval(mon, scale)
    config = {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": interval,
            "external_labels": external_labels(inventory),
        },
        "rule_files": [rules_path or str(pdir / "rules.yml")],
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": _engines(inventory, vllm_hosts or {})},
            {
                "job_name": "node-exporter",
                "static_configs": _exporters(inventory, mon, exporter_network, addresses),
            },
        ],
    }
    if alertmanager:
        config["alerting"] = prometheus_alerting(alertmanager)
    (pdir / "rules.yml").write_text(yaml.safe_dump(rule_groups(mon, scale), sort_keys=False))
    tmp = pdir / "prometheus.yml.tmp"
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    tmp.replace(pdir / "prometheus.yml")
    (pdir / "scrape_network").write_text(exporter_network)


def external_labels(inventory: Inventory) -> dict[str, str]:
    """What a lab's Prometheus adds to each alert it sends: the lab it belongs to."""
    return {LAB_LABEL: inventory.lab.name}


def _engines(inventory: Inventory, hosts: dict[str, str]) -> list[dict[str, Any]]:
    """The static configs of job `vllm`: each server's or head's engine, at `hosts`' host for
    it or else its own address. A node with a command of its own (a proxy) is no engine and
    has no vLLM metrics."""
    return [
        {"targets": [f"{hosts.get(n.name, n.address)}:{n.port}"], "labels": {"node": n.name}}
        for n in inventory.nodes
        if n.role in (Role.SERVING, Role.HEAD) and n.command is None
    ]


def _exporters(
    inventory: Inventory, mon: Monitoring, network: str, addresses: dict[str, dict[str, str]]
) -> list[dict[str, Any]]:
    """The static configs of job `node-exporter`: each node with an address on `network`."""
    return [
        {
            "targets": [f"{addresses[n.name][network]}:{mon.exporter_port}"],
            "labels": {"node": n.name},
        }
        for n in inventory.nodes
        if addresses.get(n.name, {}).get(network)
    ]


def scrape_interval(mon: Monitoring, scale: float) -> str:
    """The scrape and evaluation interval in lab time, at least 50 ms."""
    return f"{max(int(mon.scrape_interval_s / scale * 1000), 50)}ms"


def rule_groups(mon: Monitoring, scale: float) -> dict[str, Any]:
    """The DeepGEMM crash write-up's alert rules, their `for:` in lab time."""
    return {
        "groups": [
            {
                "name": "gameday-seed-rules",
                "rules": [
                    {
                        "alert": r.name,
                        "expr": _scaled_expr(r, scale),
                        "for": f"{max(int(r.for_s / scale * 1000), 1)}ms",
                        "labels": {"severity": r.severity},
                        "annotations": {
                            "summary": r.summary,
                            "runbook": r.runbook,
                            "procedure": r.procedure,
                            "log_command": r.log_command,
                            "runbook_section": r.runbook_section,
                            "for_real_world": f"{r.for_s:g}s",
                        },
                    }
                    for r in mon.rules
                ],
            }
        ]
    }


def _scaled_expr(rule: AlertRule, scale: float) -> str:
    """The rule's expr with `$window` as lab time (milliseconds, at least one)."""
    if rule.window_s is None:
        return rule.expr
    return rule.expr.replace("$window", f"{max(int(rule.window_s / scale * 1000), 1)}ms")


def expected_scrape_urls(pdir: Path) -> set[str]:
    config = yaml.safe_load((pdir / "prometheus.yml").read_text())
    return {
        f"http://{t}/metrics"
        for job in config["scrape_configs"]
        for sc in job["static_configs"]
        for t in sc["targets"]
    }


def active_targets(url: str) -> list[dict[str, Any]] | str:
    """Prometheus's active targets (its targets API), or why they could not be read."""
    try:
        data: Any = _HTTP.get(url + "/api/v1/targets?state=active").json()
    except (httpx.HTTPError, ValueError) as exc:
        return f"its targets API did not answer ({type(exc).__name__}: {exc})"
    targets = data.get("data", {}).get("activeTargets", []) if isinstance(data, dict) else []
    return [t for t in targets if isinstance(t, dict)] if isinstance(targets, list) else []


def _scraped(targets: list[dict[str, Any]] | str, want: set[str]) -> bool:
    """Prometheus has scraped exactly the targets `want`, each at least once."""
    if isinstance(targets, str):
        return False
    got = {t.get("scrapeUrl"): t.get("health") for t in targets}
    return set(got) == want and all(h != "unknown" for h in got.values())


def seen(targets: list[dict[str, Any]] | str, want: set[str]) -> str:
    """What a wait last saw of Prometheus's targets, for its timeout: each target's health and
    last error, and those it was to scrape but had not."""
    if isinstance(targets, str):
        return targets
    shown = [
        f"{t.get('scrapeUrl')} {t.get('health')}"
        + (f" ({t['lastError']})" if t.get("lastError") else "")
        for t in sorted(targets, key=lambda t: str(t.get("scrapeUrl")))
    ]
    missing = sorted(want - {t.get("scrapeUrl") for t in targets})
    text = "it had " + ("; ".join(shown) if shown else "no targets")
    return text + (f"; not among them: {', '.join(missing)}" if missing else "")


def wait_scraped(
    url: str,
    pdir: Path,
    timeout: float,
    hint: str,
    dead: Callable[[], PartDeath | None] = lambda: None,
) -> None:
    """Block until Prometheus has scraped every target of the config in `pdir` once. It has no
    push API, and its discovery hands new targets over only every 5 s (a cost that does not
    scale), so this looks every 50 ms; it runs at bring-up and after a scrape-config change."""
    want = expected_scrape_urls(pdir)
    wait_targets(url, lambda: want, timeout, hint, dead)


DEATH_CHECK_S = 0.25  # wall seconds between two looks at whether the lab's parts still run


def wait_targets(
    url: str,
    want: Callable[[], set[str]],
    timeout: float,
    hint: str,
    dead: Callable[[], PartDeath | None] = lambda: None,
) -> None:
    """Block until Prometheus has scraped exactly the scrape URLs `want()` gives, each once.
    `want` is asked on every look: on Kubernetes the targets are pod IPs, known only once the
    pods have them. `dead` (the lab's `dead_part`) is asked every DEATH_CHECK_S: a part of the
    lab that died stops the wait with PartDied at once; a timeout says what Prometheus last
    showed of its targets."""
    deadline = time.monotonic() + timeout
    checked = 0.0
    while True:
        if time.monotonic() - checked >= DEATH_CHECK_S:
            checked = time.monotonic()
            if (death := dead()) is not None:
                raise PartDied(death)
        targets, wanted = active_targets(url), want()
        if _scraped(targets, wanted):
            return
        if time.monotonic() > deadline:
            if (death := dead()) is not None:
                raise PartDied(death)
            raise LabError(
                f"Prometheus at {url} did not scrape its targets within {timeout:.0f} s: "
                + seen(targets, wanted),
                hint=hint,
            )
        time.sleep(0.05)


def reload(url: str | None) -> None:
    if url is None:
        raise LabError("this lab has no Prometheus to reload")
    try:
        _HTTP.post(url + "/-/reload", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        raise LabError(f"Prometheus did not reload its configuration: {exc}") from exc
