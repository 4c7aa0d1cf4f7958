"""junit.xml against a published JUnit XML schema (the Jenkins xUnit plugin's junit-10.xsd,
tests/data/junit-10.xsd.SOURCE.md), and its per-scenario properties."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from lxml import etree

from runner.report import junit, write_reports
from runner.results.schema import RunResult, Verdict
from tests.support.results import NOW, run_result, scenario_result

SCHEMA = etree.XMLSchema(etree.parse(str(Path(__file__).parents[2] / "data" / "junit-10.xsd")))


def mixed_run() -> RunResult:
    failed = scenario_result(
        "kv",
        id="kv-cache-shortage",
        file="scenarios/kv.yaml",
        time_to_fail_s=120.5,
        time_to_detect_s=130.25,
        finished_at=NOW + timedelta(seconds=2.5),
        runbooks={"recover 2: Raise the KV cache": "runbooks/kv.md"},
    )
    passed = scenario_result(
        "tp",
        id="tp-mismatch",
        file="scenarios/tp.yaml",
        verdict=Verdict.PASSED,
        time_to_fail_s=3.0,
        time_to_recover_s=45.0,
    )
    errored = scenario_result("e", id="head-restart", verdict=Verdict.ERROR)
    skipped = scenario_result("s", id="dhcp", verdict=Verdict.SKIPPED, time_to_fail_s=None)
    return run_result(failed, passed, errored, skipped)


def test_junit_is_valid_against_the_published_schema(tmp_path: Path) -> None:
    write_reports(mixed_run(), tmp_path)
    doc = etree.parse(str(tmp_path / "junit.xml"))
    assert SCHEMA.validate(doc), SCHEMA.error_log


def test_the_check_fails_on_a_broken_file() -> None:
    doc = etree.fromstring(junit(mixed_run()).encode())
    del doc.find("testsuite").attrib["tests"]  # required by the schema
    assert not SCHEMA.validate(etree.ElementTree(doc))
    assert "The attribute 'tests' is required but missing" in str(SCHEMA.error_log)
    misplaced = etree.fromstring(junit(mixed_run()).encode())
    case = misplaced.find("testsuite/testcase")
    case.insert(0, etree.Element("properties"))  # properties inside a testcase: not in the schema
    assert not SCHEMA.validate(etree.ElementTree(misplaced))


def test_each_scenario_carries_its_times_lab_and_file() -> None:
    root = etree.fromstring(junit(mixed_run()).encode())
    by_case = {
        s.find("testcase").get("name"): {
            p.get("name"): p.get("value") for p in s.iterfind("properties/property")
        }
        for s in root.iterfind("testsuite")
    }
    assert by_case["kv-cache-shortage"] == {
        "gameday.time_to_fail_s": "120.500",
        "gameday.time_to_detect_s": "130.250",
        "gameday.lab": "local",
        "gameday.scenario_file": "scenarios/kv.yaml",
        "runbook recover 2: Raise the KV cache": "runbooks/kv.md",
    }
    assert by_case["tp-mismatch"]["gameday.time_to_recover_s"] == "45.000"
    # a time not measured is left out, not an empty value a dashboard reads as 0
    assert "gameday.time_to_detect_s" not in by_case["tp-mismatch"]
    assert [s.get("failures") for s in root.iterfind("testsuite")] == ["1", "0", "0", "0"]
    assert [s.get("errors") for s in root.iterfind("testsuite")] == ["0", "0", "1", "0"]
    assert [s.get("skipped") for s in root.iterfind("testsuite")] == ["0", "0", "0", "1"]
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_junit_time_is_wall_clock_whatever_the_scale(scale: float) -> None:
    run = mixed_run()
    run = run.model_copy(update={"lab": run.lab.model_copy(update={"time_scale": scale})})
    root = etree.fromstring(junit(run).encode())
    assert root.find("testsuite/testcase").get("time") == "2.500"
