"""runner.run.selection: -k expressions (precedence, errors), tags, and the last run's failures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.errors import InputError
from runner.report import write_reports
from runner.results.schema import Verdict
from runner.run.selection import Selection, keyword, last_failed
from runner.spec.scenario import LoadedScenario, load_scenario
from tests.support.fakelab import scenario_doc
from tests.support.results import run_result, scenario_result

SCENARIOS = {  # id: (title, tags)
    "kv-cache-shortage": ("KV cache shortage after the weights load", ["startup", "memory"]),
    "tp-mismatch": ("Tensor-parallel size larger than the GPUs", ["startup", "config"]),
    "head-only-restart": ("The head dies; restarting it alone does not help", ["multinode"]),
}


@pytest.fixture
def loaded(tmp_path: Path) -> list[LoadedScenario]:
    out = []
    for sid, (title, tags) in SCENARIOS.items():
        p = tmp_path / f"{sid}.yaml"
        doc = scenario_doc(metadata={"id": sid, "title": title, "tags": tags})
        p.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(load_scenario(p))
    return out


def ids(scenarios: list[LoadedScenario]) -> list[str]:
    return [ls.scenario.metadata.id for ls in scenarios]


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("kv", ["kv-cache-shortage"]),
        ("KV", ["kv-cache-shortage"]),  # case-insensitive
        ("GPUs", ["tp-mismatch"]),  # the title counts
        ("not kv", ["tp-mismatch", "head-only-restart"]),
        # `and` binds tighter than `or`: kv or (tp and head) -> kv only
        ("kv or tp and head", ["kv-cache-shortage"]),
        ("(kv or tp) and not head", ["kv-cache-shortage", "tp-mismatch"]),
        # `not` binds tighter than `and`: (not kv) and size
        ("not kv and size", ["tp-mismatch"]),
        ("not (kv or tp)", ["head-only-restart"]),
        ("not not kv", ["kv-cache-shortage"]),
        ("restart and (head or tp) and not memory", ["head-only-restart"]),
    ],
)
def test_keyword(loaded: list[LoadedScenario], expr: str, expected: list[str]) -> None:
    assert ids(Selection(keyword=expr)(loaded)) == expected


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "[-k]: empty expression at column 1 of ''"),
        (
            "kv and",
            "[-k]: expected a word, `not` or `(`; the expression ended at column 7 of 'kv and'",
        ),
        ("kv tp", "[-k]: unexpected 'tp' at column 4 of 'kv tp'"),
        ("(kv or tp", "[-k]: expected `)` at column 10 of '(kv or tp'"),
        ("or kv", "[-k]: expected a word, `not` or `(`, not 'or' at column 1 of 'or kv'"),
        ("kv )", "[-k]: unexpected ')' at column 4 of 'kv )'"),
    ],
)
def test_keyword_errors(expr: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        keyword(expr)
    assert exc.value.message == message
    assert exc.value.exit_code == 2


def test_tags(loaded: list[LoadedScenario]) -> None:
    assert ids(Selection(tags=("startup",))(loaded)) == ["kv-cache-shortage", "tp-mismatch"]
    assert ids(Selection(tags=("memory", "multinode"))(loaded)) == [
        "kv-cache-shortage",
        "head-only-restart",
    ]
    assert ids(Selection(exclude_tags=("config",))(loaded)) == [
        "kv-cache-shortage",
        "head-only-restart",
    ]
    assert ids(Selection(tags=("startup",), exclude_tags=("memory",))(loaded)) == ["tp-mismatch"]
    assert ids(Selection(keyword="head", tags=("startup",))(loaded)) == []
    assert ids(Selection()(loaded)) == list(SCENARIOS)


def test_last_failed_reads_the_latest_run(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    assert last_failed(reports).run is None
    old = run_result(
        scenario_result(id="a", verdict=Verdict.FAILED), run_id="20261130T100000Z-aaaaaa"
    )
    write_reports(old, reports / old.run_id)
    new = run_result(
        scenario_result(id="b", verdict=Verdict.ERROR),
        scenario_result(id="c", verdict=Verdict.PASSED),
        scenario_result(id="d", verdict=Verdict.FAILED),
        scenario_result(id="e", verdict=Verdict.SKIPPED),
        run_id="20261130T110000Z-bbbbbb",
    )
    write_reports(new, reports / new.run_id)
    lf = last_failed(reports)
    assert lf.run == reports / "20261130T110000Z-bbbbbb"
    assert lf.ids == frozenset({"b", "d"})


def test_last_failed_when_all_passed(tmp_path: Path) -> None:
    run = run_result(scenario_result(id="a", verdict=Verdict.PASSED), run_id="r1")
    write_reports(run, tmp_path / "r1")
    assert last_failed(tmp_path).ids == frozenset()
    assert last_failed(tmp_path).run == tmp_path / "r1"
