"""Scenario hints: loaded with the scenario, a bad one named by file, line and field; released by
delay or on request, in order (runner.drill.hints)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from runner.drill.hints import Ack, Hints
from runner.errors import ScenarioError
from runner.results.drill_record import HintView
from runner.spec.scenario import Hint, load_scenario
from tests.support.fakelab import scenario_doc


def test_hints_load_with_the_scenario(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(scenario_doc(hints=[{"text": "a", "after_s": 30}, {"text": "b"}])))
    assert load_scenario(p).scenario.hints == [Hint(text="a", after_s=30), Hint(text="b")]


def test_a_hint_without_text_is_named_by_file_line_and_field(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(scenario_doc(hints=[{"after_s": 5}]), sort_keys=False))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "hints.0.text"
    assert e.value.line is not None
    assert "after_s: 5" in p.read_text().splitlines()[e.value.line - 1]


def test_a_negative_delay_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(scenario_doc(hints=[{"text": "a", "after_s": -1}])))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "hints.0.after_s"


def test_release_by_delay_then_on_request_in_order() -> None:
    h = Hints([Hint(text="a", after_s=10), Hint(text="b"), Hint(text="c", after_s=20)])
    assert h.due(9.9, 12.0) == []
    assert h.due(10.0, 12.1) == [HintView(index=1, text="a", at_s=12.1, requested=False)]
    assert h.request(13.0) == HintView(index=2, text="b", at_s=13.0, requested=True)
    assert h.request(14.0) == HintView(index=3, text="c", at_s=14.0, requested=True)
    assert h.due(30.0, 32.0) == []  # c is out already
    assert h.request(15.0) is None
    assert h.left == 0


def test_only_the_first_ack_counts() -> None:
    a = Ack()
    assert (a.ack(5.0), a.ack(7.0), a.at_s) == (True, False, 5.0)
