"""runner.run.plan: what a run would do, line by line, with the lab never contacted."""

from __future__ import annotations

from pathlib import Path

import yaml

from runner.labs.base import Capability
from runner.labs.fake import FakeLab
from runner.run.plan import describe_action, plan_scenario, render
from runner.spec.actions import Restart, SetArgs, SetEnv
from runner.spec.scenario import LoadedScenario, load_scenario
from tests.support.fakelab import inventory, scenario_doc


def loaded(tmp_path: Path, **fields: object) -> LoadedScenario:
    doc = scenario_doc(**fields)
    doc["detect"] = {"alerts": [{"name": "VllmDown", "within_s": 120, "labels": {"sev": "page"}}]}
    doc["recover"][0]["actions"].insert(
        0, {"kind": "set_env", "node": "serving", "env": {"VLLM_X": "1", "HOME": None}}
    )
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_scenario(p)


def lab(tmp_path: Path, capabilities: frozenset[Capability] = frozenset(Capability)) -> FakeLab:
    fake = FakeLab(inventory(tmp_path), state_dir=tmp_path / "state", capabilities=capabilities)
    fake.on_call = refuse
    return fake


def refuse(name: str) -> None:
    raise AssertionError(f"the plan called the lab: {name}")


def test_plan_lines(tmp_path: Path) -> None:
    ls = loaded(tmp_path)
    assert render(plan_scenario(ls, lab(tmp_path))) == [
        "fake-startup on lab fake (local): A wrong flag stops the start-up",
        f"  file: {tmp_path / 's.yaml'}",
        "  baseline:",
        '    probe: http path="/health"',
        '    probe: inference prompt="Say OK." max_tokens=4',
        "  inject (target serving):",
        "    set_args on serving: --max-model-len 99999",
        "      -> serving: args Qwen/Qwen2.5-0.5B-Instruct --port 8000 -> "
        "Qwen/Qwen2.5-0.5B-Instruct --port 8000 --max-model-len 99999",
        "  expect:",
        "    failure: exit on serving",
        "    signature in the previous log, in order:",
        "      1. /Loading weights/",
        "      2. /max_model_len \\((?P<n>\\d+)\\) is too large/ where n eq 99999",
        "    exit code: 1",
        "    time to fail: 100-300 s real (lab x1000: 0.100-0.300 s, ± 0.002 s allowance)",
        "  alerts:",
        "    VllmDown within 120 s real (0.120 s on the lab) sev=page",
        "  recover, in order:",
        "    1. Restart and hope [does_not_restore]: the flag is still wrong",
        "      set_env on serving: VLLM_X=1, HOME unset",
        "        -> serving: env set VLLM_X=1",
        "      restart serving",
        "    2. Roll back [restores]",
        "      rollback: re-apply the lab's baseline",
        "  verify:",
        '    probe: http path="/health"',
        '    probe: inference prompt="Say OK." max_tokens=4',
        "    time to recover: 0-600 s real (lab x1000: 0.000-0.600 s, ± 0.002 s allowance)",
    ]


def test_changes_carry_over_and_rollback_returns_to_the_baseline(tmp_path: Path) -> None:
    recover = [
        {
            "name": "Raise it more",
            "outcome": "does_not_restore",
            "actions": [{"kind": "set_args", "node": "serving", "args": {"--max-model-len": 5}}],
        },
        {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]},
        {
            "name": "Then a flag",
            "outcome": "restores",
            "actions": [{"kind": "set_args", "node": "serving", "args": {"--enforce-eager": True}}],
        },
    ]
    plan = plan_scenario(loaded(tmp_path, recover=recover), lab(tmp_path))
    base = "Qwen/Qwen2.5-0.5B-Instruct --port 8000"
    assert [a.change for s in plan.recover for a in s.actions] == [
        "serving: env set VLLM_X=1",  # the set_env loaded() adds; HOME is not set on the node
        f"serving: args {base} --max-model-len 99999 -> {base} --max-model-len 5",
        None,
        f"serving: args {base} -> {base} --enforce-eager",
    ]


def test_not_on_this_lab(tmp_path: Path) -> None:
    ls = loaded(tmp_path, labs=["compose"])
    assert render(plan_scenario(ls, lab(tmp_path))) == [
        "fake-startup on lab fake (local): A wrong flag stops the start-up",
        "  not on this lab: applies to compose only",
    ]


def test_what_the_lab_cannot_do(tmp_path: Path) -> None:
    ls = loaded(tmp_path)
    plan = plan_scenario(ls, lab(tmp_path, frozenset({Capability.PROCESSES})))
    assert plan.not_on_this_lab == [
        "not on this lab: the fake lab cannot run the lab's Prometheus, which detect.alerts needs"
    ]


def test_describe_action() -> None:
    assert (
        describe_action(SetArgs(kind="set_args", args={"model_tag": "x/y", "--a": None, "--b": 2}))
        == "set_args on serving: model x/y, --a removed, --b 2"
    )
    assert describe_action(SetEnv(kind="set_env", node="n1", env={"A": None})) == (
        "set_env on n1: A unset"
    )
    assert describe_action(Restart(kind="restart", nodes=["node1", "node2"])) == (
        "restart node1, node2 together"
    )
    assert describe_action(Restart(kind="restart", nodes=["node1", "node2"], together=False)) == (
        "restart node1, node2"
    )
