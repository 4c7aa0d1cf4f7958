"""A scenario's load on the local lab: one run of head-only-restart reports per phase what its
users felt, and a copy with an impact bound set too tight fails, expected against observed."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.cli import gameday, scenario_variant

pytestmark = pytest.mark.e2e


def test_head_only_restart_reports_what_users_felt_and_a_tight_bound_fails(
    tmp_path: Path,
) -> None:
    tight = scenario_variant(
        tmp_path,
        "scenarios/head-only-restart.yaml",
        "head-only-restart-tight",
        ("fault: {min_error_rate: 0.5}", "fault: {max_error_rate: 0.1}"),
    )
    p = gameday(
        "run",
        "scenarios/head-only-restart.yaml",
        str(tight),
        "--lab",
        "inventories/local.yaml",
        "--reports",
        str(tmp_path / "reports"),
    )
    assert p.returncode == 1, p.stdout + p.stderr
    run_dir = (tmp_path / "reports" / "latest").resolve()
    by_id = {s["id"]: s for s in json.loads((run_dir / "result.json").read_text())["scenarios"]}
    shipped = by_id["head-only-restart"]
    assert shipped["verdict"] == "passed", [
        a for a in shipped["assertions"] if a["verdict"] != "passed"
    ]
    impact = shipped["impact"]
    phases = {f["phase"]: f for f in impact["phases"]}
    assert list(phases) == ["baseline", "inject", "fault", "recover", "verify"]
    for name, f in phases.items():
        assert 0 <= f["failed"] <= f["sent"]
        assert f["sent"] > 0 or name == "inject"  # a signal is in place at once
    assert phases["baseline"]["failed"] == 0 and phases["verify"]["failed"] == 0
    assert phases["fault"]["error_rate"] >= 0.9  # the local lab: no answer while the head is gone
    assert phases["baseline"]["p50_ms"] <= phases["baseline"]["p99_ms"]
    assert impact["users_saw_first_s"] is not None and impact["users_saw_last_s"] is not None
    users = [e["event"] for e in shipped["timeline"] if e["source"] == "users"]  # a Gantt lane
    assert users[0].startswith("load started") and users[-1].startswith("load stopped")
    assert "users saw the first failed request" in users
    names = [a["name"] for a in shipped["assertions"]]
    assert "impact: users saw first" in names and "impact: fault: error rate felt" in names
    # the terminal's summary, JUnit's properties and report.md say the same figures
    assert re.search(r"head-only-restart load: 20 requests/s to node1", p.stdout)
    assert re.search(r"fault: \d+ sent, \d+ failed \(\d+\.\d%\), p50", p.stdout)
    assert "users saw the fault first" in p.stdout
    props = {
        e.get("name"): e.get("value")
        for suite in ET.parse(run_dir / "junit.xml").getroot()
        if suite.get("name", "").endswith("head-only-restart")
        for e in suite.iter("property")
    }
    assert props["gameday.impact.fault.error_rate"] == f"{phases['fault']['error_rate']:.6g}"
    assert float(props["gameday.impact.verify.p99_ms"]) == pytest.approx(
        phases["verify"]["p99_ms"], rel=1e-5
    )
    assert "- baseline: " in (run_dir / "report.md").read_text()
    # the too-tight copy: the one bound fails, expected against observed
    failed = [a for a in by_id["head-only-restart-tight"]["assertions"] if a["verdict"] == "failed"]
    assert [a["name"] for a in failed] == ["impact: fault: error rate"]
    assert failed[0]["expected"] == "error rate <= 0.1"
    assert re.search(
        r"FAILED head-only-restart-tight: impact: fault: error rate\s+expected: error rate "
        r"<= 0\.1\s+observed: [01]\.\d{3} \(\d+ of \d+ failed",
        p.stdout,
    )
