"""Triage on a corpus of pasted excerpts (tests/data/triage): the operations write-ups' own, both
vLLM wordings and older releases' (dated), wrapped, masked, quoted, stamped and prefixed, cut
short, PyTorch's prefixes in every month, and healthy or unrelated logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.spec.scenario import discover, load_scenario
from runner.triage import Finding, triage
from runner.triage.match import Log

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "data" / "triage"
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]
EXPECTED: dict[str, list[list[Any]]] = yaml.safe_load((CORPUS / "expected.yaml").read_text())


def test_every_excerpt_has_an_expectation() -> None:
    files = sorted(p.name for p in CORPUS.iterdir() if p.name != "expected.yaml")
    assert files == sorted(EXPECTED)
    failures = [k for k, v in EXPECTED.items() if v]
    assert (len(failures), len(EXPECTED) - len(failures)) == (405, 152)
    assert len([k for k in failures if k.startswith("seed")]) == 8


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus(name: str) -> None:
    text = (CORPUS / name).read_bytes().decode()
    got = [
        [
            f.scenario.scenario.metadata.id,
            " + ".join(s.view for s in f.sightings),
            f.phase.value if f.phase else None,
            " + ".join(s.pod for s in f.sightings if s.pod) or None,
            *_paste(f),
        ]
        for f in triage(text, SCEN)
    ]
    assert got == EXPECTED[name]


def test_the_index_of_required_strings_changes_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every excerpt triaged with the patterns' prefilter and with every pattern searched gives
    the same findings, to the line and the capture (runner.triage.match's index)."""

    def shown(fs: list[Finding]) -> list[Any]:
        return [
            (
                f.scenario.scenario.metadata.id,
                f.advice,
                f.fixes,
                f.shortcuts,
                f.phase,
                *((s.view, s.cut, s.when, s.evidence) for s in f.sightings),
            )
            for f in fs
        ]

    texts = [(CORPUS / name).read_bytes().decode() for name in sorted(EXPECTED)]
    indexed = [shown(triage(t, SCEN)) for t in texts]
    monkeypatch.setattr(Log, "index", lambda self, regexes: None)
    assert [shown(triage(t, SCEN)) for t in texts] == indexed


def _paste(f: Finding) -> list[str]:
    said = [f"vLLM {r}" for r in f.releases] + (["cut"] if f.cut else [])
    return [", ".join(said)] if said else []
