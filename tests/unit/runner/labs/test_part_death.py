"""A part the lab starts beside its engines (Prometheus, Alertmanager, an exporter, a monitoring
pod or container) that dies ends the wait on it at once, naming the part, how it died and what
it printed last (redacted); a wait that times out says what Prometheus last showed of its
targets. Each lab kind's `dead_part` is read from its runtime's own record: the supervisor's
exits, the pods' container statuses, Docker's restart count."""

from __future__ import annotations

import io
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from runner.cli import output
from runner.errors import LabError
from runner.labs.base import PartDeath, PartDied, last_lines
from runner.labs.common import prometheus_config as prom
from runner.labs.compose.driver import ComposeLab
from runner.labs.kubernetes.access import PodAccess
from runner.labs.local.driver import LocalLab
from runner.report import write_reports
from runner.results.redact import MASK
from runner.results.schema import Assertion, Phase, Verdict, load_result
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT
from tests.support.results import run_result, scenario_result

DEATH = PartDeath(
    part="Prometheus",
    exit_code=1,
    restarts=2,
    last_lines=("level=info starting", "err: opening storage failed: lock DB directory"),
    log="/tmp/lab/services/prometheus.log",
)


def _prometheus(monkeypatch: pytest.MonkeyPatch, targets: list[dict[str, Any]] | None) -> None:
    """Prometheus's targets API answering `targets` (None: not answering at all)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if targets is None:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"data": {"activeTargets": targets}})

    monkeypatch.setattr(prom, "_HTTP", httpx.Client(transport=httpx.MockTransport(handle)))


def test_a_timed_out_wait_says_which_targets_prometheus_had_and_why_they_are_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _prometheus(
        monkeypatch,
        [
            {
                "scrapeUrl": "http://127.0.77.10:8000/metrics",
                "health": "down",
                "lastError": "connection refused",
            },
            {"scrapeUrl": "http://127.0.77.1:9100/metrics", "health": "up", "lastError": ""},
        ],
    )
    want = {"http://127.0.77.10:8000/metrics", "http://127.0.77.11:9100/metrics"}
    with pytest.raises(LabError) as err:
        prom.wait_targets("http://prom", lambda: want, 0.1, hint="h")
    assert err.value.message == (
        "Prometheus at http://prom did not scrape its targets within 0 s: it had "
        "http://127.0.77.10:8000/metrics down (connection refused); "
        "http://127.0.77.1:9100/metrics up; "
        "not among them: http://127.0.77.11:9100/metrics"
    )
    assert not isinstance(err.value, PartDied)


def test_a_timed_out_wait_on_a_prometheus_that_never_answered_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _prometheus(monkeypatch, None)
    with pytest.raises(LabError, match=r"its targets API did not answer \(ConnectError: conn"):
        prom.wait_targets("http://prom", set, 0.1, hint="h")


def test_a_dead_part_ends_the_wait_at_once_with_its_status_and_last_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _prometheus(monkeypatch, [])
    deaths = iter([None, DEATH])
    t0 = time.monotonic()
    with pytest.raises(PartDied) as err:
        prom.wait_targets(
            "http://prom", lambda: {"http://x/metrics"}, 60, "h", lambda: next(deaths)
        )
    assert time.monotonic() - t0 < 2  # two looks at the lab's parts, not the 60 s timeout
    assert err.value.death == DEATH
    assert err.value.message == (
        "Prometheus died: exited with status 1, restarted 2 times; its last line: "
        "err: opening storage failed: lock DB directory"
    )
    assert err.value.hint == "its whole output: /tmp/lab/services/prometheus.log"


def test_a_parts_last_lines_are_redacted_and_bounded() -> None:
    text = "\n".join(
        ["start", "", "--web.config=x HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123", "y" * 9000]
    )
    lines = last_lines(text, 3)
    assert lines[0] == "start"
    assert "hf_abcdefghijklmnopqrstuvwxyz0123" not in lines[1] and MASK in lines[1]
    assert len(lines[2]) <= 500 and "truncated" in lines[2]
    assert last_lines("a\nb\nc\n", 2) == ("b", "c")


# ---- the local lab: from the supervisor's record of its processes -----------------------


def test_the_local_lab_names_its_dead_process_from_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = LocalLab(load_inventory(ROOT / "inventories" / "local.yaml"))
    log = tmp_path / "alertmanager.log"
    log.write_text("x\n" * 5000 + "level=error msg='loading configuration' token=s3cr3t-value\n")
    running = {"restart": True, "exits": 0, "running": True, "log": str(tmp_path / "none")}
    dead = {"restart": True, "exits": 3, "running": False, "last_exit_code": 1, "log": str(log)}
    stray = {"restart": False, "exits": 1, "running": False, "last_exit_code": 9, "log": "x"}
    procs: dict[str, dict[str, Any]] = {
        "serving": {"node-exporter": running, "OmniParser": stray},
        "lab": {"prometheus": running},
    }
    monkeypatch.setattr(lab, "aux_processes", lambda: procs)
    assert lab.dead_part() is None  # a stray program the scenario started is not the lab's
    procs["lab"]["alertmanager"] = dead
    death = lab.dead_part()
    assert death is not None
    assert (death.part, death.exit_code, death.restarts) == ("Alertmanager", 1, 2)
    assert death.last_lines[-1] == f"level=error msg='loading configuration' token={MASK}"
    assert len(death.last_lines) == 10 and death.log == str(log)
    procs["lab"]["alertmanager"] = running
    procs["serving"]["node-exporter"] = dead
    death = lab.dead_part()
    assert death is not None and death.part == "node-exporter of node serving"


# ---- Kubernetes: the monitoring pods' container statuses --------------------------------------


def _status(**state: Any) -> SimpleNamespace:
    ns = SimpleNamespace
    return ns(
        name="prometheus",
        restart_count=state.pop("restarts", 0),
        state=ns(**({"running": None, "waiting": None, "terminated": None} | state.get("now", {}))),
        last_state=ns(terminated=state.get("before")),
    )


class _Kube:
    """The calls dead_part makes, answered from `pods` and `logs`."""

    def __init__(self, pods: dict[str, list[Any]], logs: str) -> None:
        self.ns = "gameday-lab"
        self.asked: list[dict[str, Any]] = []

        def list_pods(ns: str, label_selector: str) -> Any:
            app = label_selector.rsplit("=", 1)[1]
            return SimpleNamespace(items=pods.get(app, []))

        def read_log(name: str, ns: str, **kw: Any) -> str:
            self.asked.append({"name": name, **kw})
            return logs

        self.core = SimpleNamespace(list_namespaced_pod=list_pods, read_namespaced_pod_log=read_log)

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


def _pod(name: str, *statuses: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, deletion_timestamp=None),
        status=SimpleNamespace(container_statuses=list(statuses)),
    )


def _access(kube: _Kube) -> PodAccess:
    inv = load_inventory(ROOT / "inventories" / "kube-testserver.yaml")
    nothing = lambda *a: None  # noqa: E731
    return PodAccess(inv, kube, None, None, nothing, nothing, nothing)  # type: ignore[arg-type]


def test_a_crash_looping_prometheus_pod_is_named_with_reason_restarts_and_log() -> None:
    ns = SimpleNamespace
    looping = _status(
        restarts=4,
        now={"waiting": ns(reason="CrashLoopBackOff")},
        before=ns(exit_code=1, reason="Error"),
    )
    healthy = _status(now={"running": ns(started_at="now")})
    kube = _Kube(
        {
            "gameday-prometheus": [_pod("gameday-prometheus-7d9", looping)],
            "gameday-alertmanager": [_pod("gameday-alertmanager-1", healthy)],
        },
        logs='ts=1 level=info\nts=2 level=error err="open prometheus.yml: no such file"\n',
    )
    death = _access(kube).dead_part()
    assert death == PartDeath(
        part="Prometheus (pod gameday-prometheus-7d9)",
        exit_code=1,
        reason="CrashLoopBackOff",
        restarts=4,
        last_lines=("ts=1 level=info", 'ts=2 level=error err="open prometheus.yml: no such file"'),
        log="kubectl -n gameday-lab logs gameday-prometheus-7d9",
    )
    # waiting to restart: the kubelet's log of the container is the dead one's
    assert kube.asked[0]["previous"] is False and kube.asked[0]["container"] == "prometheus"
    assert death.summary().startswith(
        "Prometheus (pod gameday-prometheus-7d9) died: exited with status 1, CrashLoopBackOff, "
        "restarted 4 times; its last line: ts=2"
    )


def test_running_monitoring_pods_are_not_dead_and_a_restarted_one_is() -> None:
    ns = SimpleNamespace
    fine = _status(now={"running": ns(started_at="now")})
    starting = _status(now={"waiting": ns(reason="ContainerCreating")})
    kube = _Kube({"gameday-prometheus": [_pod("p", fine)], "gameday-alertmanager": []}, "")
    assert _access(kube).dead_part() is None
    kube = _Kube({"gameday-prometheus": [_pod("p", starting)]}, "")
    assert _access(kube).dead_part() is None
    again = _status(
        restarts=1, now={"running": ns(started_at="now")}, before=ns(exit_code=137, reason="OOM")
    )
    kube = _Kube({"gameday-alertmanager": [_pod("am", again)]}, "killed\n")
    death = _access(kube).dead_part()
    assert death is not None and death.part == "Alertmanager (pod am)"
    assert (death.exit_code, death.restarts, death.last_lines) == (137, 1, ("killed",))
    assert kube.asked[0]["previous"] is True  # running again: the dead one is the previous
    assert death.log.endswith("logs am --previous")


# ---- compose: Docker's record of the monitoring containers -------------------------------------


def test_the_compose_lab_names_a_restarting_monitoring_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lab = ComposeLab(load_inventory(ROOT / "inventories" / "compose.yaml"))

    def container(name: str, status: str, restarts: int, code: int, node: str = "") -> Any:
        return SimpleNamespace(
            name=name,
            attrs={"State": {"Status": status, "ExitCode": code}, "RestartCount": restarts},
            labels={"gameday.node": node} if node else {},
            logs=lambda tail: b"msg=starting\nerr: bind: address already in use\n",
        )

    found = {
        "prometheus": [container("c-prometheus", "running", 0, 0)],
        "alertmanager": [container("c-alertmanager", "running", 0, 0)],
        "host": [container("c-node1-host", "running", 0, 0, "node1")],
    }
    monkeypatch.setattr(lab, "_containers", lambda role: found[role])
    assert lab.dead_part() is None
    found["host"].append(container("c-node2-host", "restarting", 3, 2, "node2"))
    death = lab.dead_part()
    assert death == PartDeath(
        part="node-exporter of node node2 (container c-node2-host)",
        exit_code=2,
        reason="restarting",
        restarts=3,
        last_lines=("msg=starting", "err: bind: address already in use"),
        log="docker logs c-node2-host",
    )


# ---- what the run records: result.json, report.md, junit.xml and the console -----------------


def _errored() -> Any:
    return run_result(
        scenario_result(
            verdict=Verdict.ERROR,
            assertions=[
                Assertion(
                    name="baseline: Prometheus scraping",
                    phase=Phase.BASELINE,
                    verdict=Verdict.ERROR,
                    expected="Prometheus has scraped every target of its configuration",
                    observed=DEATH.summary(),
                    died=DEATH,
                ),
                Assertion(
                    name="other", phase=Phase.RUN, verdict=Verdict.PASSED, expected="", observed=""
                ),
            ],
        ),
        verdict=Verdict.ERROR,
    )


def test_the_death_is_in_result_json_report_md_and_junit(tmp_path: Path) -> None:
    write_reports(_errored(), tmp_path)
    data = json.loads((tmp_path / "result.json").read_text())
    died, passed = data["scenarios"][0]["assertions"]
    assert died["died"] == {
        "part": "Prometheus",
        "exit_code": 1,
        "reason": "",
        "restarts": 2,
        "last_lines": ["level=info starting", "err: opening storage failed: lock DB directory"],
        "log": "/tmp/lab/services/prometheus.log",
    }
    assert "died" not in passed  # left out, not null, where no part died
    assert load_result(tmp_path / "result.json").scenarios[0].assertions[0].died == DEATH
    md = (tmp_path / "report.md").read_text()
    assert "exited with status 1" in md
    assert "Last lines of Prometheus (baseline: Prometheus scraping):" in md
    assert "    err: opening storage failed: lock DB directory" in md
    error = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite/testcase/error")
    assert error is not None
    assert "exited with status 1" in error.get("message", "")
    assert "last lines of Prometheus:" in (error.text or "")
    assert "    level=info starting" in (error.text or "")


def test_the_console_shows_the_dead_parts_last_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    console = output._Console(file=buf, force_terminal=False, highlight=False, width=200)
    monkeypatch.setattr(output, "out", console)
    output.run_summary(_errored(), "reports/r1")
    text = buf.getvalue()
    assert "observed: Prometheus died: exited with status 1" in text
    assert "last lines of Prometheus:" in text
    assert "      err: opening storage failed: lock DB directory" in text
