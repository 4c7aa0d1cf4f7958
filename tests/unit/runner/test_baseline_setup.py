"""The `baseline.setup` section of the format: what it may hold (an error at file:line:field
otherwise), and that validation, capabilities and `gameday plan` read it as they read inject."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import ScenarioError
from runner.labs.base import Capability
from runner.labs.capabilities import lacking
from runner.labs.fake import FakeLab
from runner.run.plan import plan_scenario, render
from runner.spec.actions import SetArgs
from runner.spec.checks import check_engine_names
from runner.spec.scenario import LoadedScenario, load_scenario
from tests.support.fakelab import HEALTH, inventory, scenario_doc

JAMBA = {
    "kind": "set_args",
    "node": "serving",
    "args": {"model_tag": "gameday-lab/jamba-hybrid-1b"},
}


# a rollback would undo the setup too (refused): the recovery puts back what inject changed
PUT_BACK = [
    {
        "name": "Put the flag back",
        "outcome": "restores",
        "actions": [{"kind": "set_args", "node": "serving", "args": {"--max-model-len": None}}],
    }
]


def write(tmp_path: Path, setup: list[Any]) -> Path:
    doc = scenario_doc(baseline={"setup": setup, "probes": [HEALTH]}, recover=PUT_BACK)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def line_of(p: Path, text: str) -> int:
    return next(i for i, ln in enumerate(p.read_text().splitlines(), 1) if text in ln)


def test_setup_is_optional_and_takes_the_actions_inject_takes(tmp_path: Path) -> None:
    assert load_scenario(write(tmp_path, [])).scenario.baseline.setup == []
    ls = load_scenario(
        write(tmp_path, [JAMBA, {"kind": "set_env", "env": {"VLLM_LAB_BUILD": "fixed"}}])
    )
    first = ls.scenario.baseline.setup[0]
    assert isinstance(first, SetArgs) and first.args == JAMBA["args"]


@pytest.mark.parametrize(
    ("setup", "field", "at", "message"),
    [
        (
            [JAMBA, {"kind": "rollback"}],
            "baseline.setup.1",
            "kind: rollback",
            "rollback in baseline.setup has nothing to roll back",
        ),
        (
            [{"kind": "set_arg", "node": "serving"}],
            "baseline.setup.0",
            "kind: set_arg",
            "set_arg",
        ),
        (
            [{"kind": "set_args", "node": "serving", "args": {"gpu-memory": 0.2}}],
            "baseline.setup.0.args.gpu-memory",
            "gpu-memory",
            "",
        ),
    ],
    ids=["rollback", "unknown kind", "bad flag key"],
)
def test_a_wrong_setup_is_one_error_at_its_line(
    tmp_path: Path, setup: list[Any], field: str, at: str, message: str
) -> None:
    p = write(tmp_path, setup)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    e = err.value
    assert (e.field, e.line) == (field, line_of(p, at))
    assert e.message.startswith(f"{p}:{e.line} [{field}]: ")
    assert message in e.message


def test_an_engine_flag_typo_in_setup_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    typo = {"kind": "set_args", "node": "serving", "args": {"--gpu-memory-utilisation": "0.5"}}
    p = write(tmp_path, [typo])
    with pytest.raises(ScenarioError) as err:
        check_engine_names(load_scenario(p))
    e = err.value
    assert e.field == "baseline.setup.0.args.--gpu-memory-utilisation"
    assert e.line == line_of(p, "--gpu-memory-utilisation")
    assert e.hint == "did you mean '--gpu-memory-utilization'?"


def loaded(tmp_path: Path, setup: list[Any]) -> LoadedScenario:
    return load_scenario(write(tmp_path, setup))


def fake(tmp_path: Path, capabilities: frozenset[Capability] = frozenset(Capability)) -> FakeLab:
    lab = FakeLab(inventory(tmp_path), state_dir=tmp_path / "state", capabilities=capabilities)

    def refuse(name: str) -> None:
        raise AssertionError(f"the plan called the lab: {name}")

    lab.on_call = refuse
    return lab


def test_a_setup_the_lab_cannot_carry_out_is_not_on_this_lab(tmp_path: Path) -> None:
    signal = {"kind": "signal", "node": "serving", "process": "engine_core", "signal": "TERM"}
    ls = loaded(tmp_path, [signal])
    lab = fake(tmp_path, frozenset(Capability) - {Capability.SIGNALS})
    assert lacking(ls.scenario, lab) == [
        "not on this lab: the fake lab cannot signal a process inside a node (exec), which "
        "baseline.setup[0] (signal) needs"
    ]


def test_the_plan_shows_setup_and_the_injection_against_it(tmp_path: Path) -> None:
    ls = loaded(tmp_path, [JAMBA])
    lines = render(plan_scenario(ls, fake(tmp_path)))
    i = lines.index("  baseline:")
    assert lines[i + 1 : i + 5] == [
        "    setup (journalled, undone at cleanup):",
        "      set_args on serving: model gameday-lab/jamba-hybrid-1b",
        "        -> serving: args Qwen/Qwen2.5-0.5B-Instruct --port 8000 -> "
        "gameday-lab/jamba-hybrid-1b --port 8000",
        '    probe: http path="/health"',
    ]
    # the injection's change starts from the setup's configuration, as the run applies it
    inject = lines[lines.index("  inject (target serving):") + 2]
    assert inject.startswith("      -> serving: args gameday-lab/jamba-hybrid-1b --port 8000 ->")


def test_a_rollback_in_recovery_is_refused_where_a_setup_would_be_rolled_back(
    tmp_path: Path,
) -> None:
    """A rollback puts back every change of the run, setup included: the scenario would judge
    the lab's default model instead of its own. Refused, on the shared sections and on a
    variant that brings the rollback or the setup."""
    doc = scenario_doc(baseline={"setup": [JAMBA], "probes": [HEALTH]})
    doc["recover"] = [
        {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]}
    ]
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ScenarioError) as exc:
        load_scenario(p)
    assert "recover[0] ('Roll back') rolls back, which also undoes baseline.setup" in str(exc.value)
    # the same rollback without a setup is fine
    del doc["baseline"]["setup"]
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert load_scenario(p).scenario.baseline.setup == []
    # a per_lab setup with the shared rollback: refused, naming where
    doc["per_lab"] = {"local": {"baseline": {"setup": [JAMBA], "probes": [HEALTH]}}}
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ScenarioError, match=r"rolls back, which also undoes baseline\.setup"):
        load_scenario(p)
