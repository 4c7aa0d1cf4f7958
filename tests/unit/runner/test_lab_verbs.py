"""`gameday lab ps|logs|restart|stop|start|config` on the fake lab: which lab they act on,
their arguments, the changes they build and apply, and their refusals (exit 2 and 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from runner.cli.main import main
from runner.cli.options import config
from runner.labs.base import NodeConfig
from runner.labs.fake import FakeLab
from runner.spec.inventory import Inventory
from runner.spec.kinds import NodeStatus
from tests.support.fakelab import WRONG_FLAG_LOGS, inventory, wrong_flag

SERVING_ARGS = ("Qwen/Qwen2.5-0.5B-Instruct", "--port", "8000")


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeLab:
    fake = FakeLab(inventory(tmp_path), wrong_flag(), state_dir=tmp_path / "state")
    fake.up()
    opened: list[Path] = []

    def open_lab(inv: Inventory) -> FakeLab:
        opened.append(inv.path)
        return fake

    monkeypatch.setattr("runner.cli.lab_verbs.open_lab", open_lab)
    config.cache_clear()  # each invocation reads its own environment, as a new process does
    fake.opened = opened  # type: ignore[attr-defined]
    return fake


def gd(lab: FakeLab, *args: str, env: dict[str, str] | None = None) -> Result:
    full = [*args[:2], "--lab", str(lab.inventory.path), *args[2:]] if env is None else list(args)
    return CliRunner().invoke(main, full, env=env, catch_exceptions=False)


def test_ps_lists_every_node(lab: FakeLab) -> None:
    res = gd(lab, "lab", "ps", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert list(rows) == ["serving", "node1", "node2"]
    assert rows["serving"] == {
        "role": "serving",
        "status": "running",
        "ready": True,
        "restarts": 0,
        "generation": 0,
        "process": "-",
        "url": "http://127.0.77.10:8000",
    }
    assert [rows[n]["role"] for n in ("node1", "node2")] == ["head", "worker"]


def test_lab_from_env_then_default(lab: FakeLab) -> None:
    res = gd(lab, "lab", "ps", env={"GAMEDAY_LAB": str(lab.inventory.path)})
    assert res.exit_code == 0, res.output
    config.cache_clear()
    res = CliRunner().invoke(main, ["lab", "ps"], env={"GAMEDAY_LAB": None})
    assert res.exit_code == 0, res.output
    assert lab.opened == [lab.inventory.path, Path.cwd() / "inventories/local.yaml"]  # type: ignore[attr-defined]


def test_config_applies_one_change_with_args_and_env(lab: FakeLab) -> None:
    res = gd(
        lab,
        "lab",
        "config",
        "serving",
        "--set-arg",
        "--max-model-len=2048",
        "--set-arg",
        "--enforce-eager",
        "--set-env",
        "FOO=bar",
    )
    assert res.exit_code == 0, res.output
    assert len(lab.applied) == 1
    change = lab.applied[0]
    assert change.before == NodeConfig(args=SERVING_ARGS, env={})
    assert change.after == NodeConfig(
        args=(*SERVING_ARGS, "--max-model-len", "2048", "--enforce-eager"), env={"FOO": "bar"}
    )
    assert lab.states()["serving"].generation == 1
    assert "(generation 1)" in res.output
    # read back from the lab, as a run in another process reads it
    assert lab.config("serving") == change.after


def test_config_unsets_and_sets_the_positional_model(lab: FakeLab) -> None:
    res = gd(
        lab,
        "lab",
        "config",
        "serving",
        "--set-arg",
        "model_tag=/models/qwen",
        "--unset-arg",
        "--port",
    )
    assert res.exit_code == 0, res.output
    assert lab.config("serving").args == ("/models/qwen",)


def test_config_without_changes_prints_config_with_secrets_masked(lab: FakeLab) -> None:
    token = "hf_" + "a" * 30
    assert gd(lab, "lab", "config", "serving", "--set-env", f"HF_TOKEN={token}").exit_code == 0
    res = gd(lab, "lab", "config", "serving", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"args": list(SERVING_ARGS), "env": {"HF_TOKEN": "<redacted>"}}
    res = gd(lab, "lab", "config", "serving")
    assert res.output.splitlines() == [
        f"args: {' '.join(SERVING_ARGS)}",
        "env:",
        "  HF_TOKEN=<redacted>",
    ]


def test_config_same_as_now_applies_nothing(lab: FakeLab) -> None:
    res = gd(lab, "lab", "config", "serving", "--set-arg", "--port=8000")
    assert res.exit_code == 0 and "no change" in res.output
    assert lab.applied == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set-arg", "--max-model-lenn=1"], "did you mean '--max-model-len'?"),
        (["--unset-arg", "--gpu-memory-utilisation"], "did you mean '--gpu-memory-utilization'?"),
        (["--set-arg", "--model=x"], "--set-arg model_tag=NAME"),
        (["--set-arg", "model_tag"], "the model needs a name"),
        (
            ["--set-env", "VLLM_WORKER_MULTIPROC_METHD=spawn"],
            "did you mean 'VLLM_WORKER_MULTIPROC_METHOD'?",
        ),
        (["--set-env", "FOO"], "'FOO' is not NAME=VALUE"),
        (["--unset-env", "FOO=1"], "'FOO=1' is not NAME"),
    ],
)
def test_config_refuses_bad_input_with_exit_2(lab: FakeLab, args: list[str], expected: str) -> None:
    res = gd(lab, "lab", "config", "serving", *args)
    assert res.exit_code == 2
    assert expected in res.output
    assert "Traceback" not in res.output
    assert lab.applied == []


def test_unknown_node_is_exit_2_with_a_suggestion(lab: FakeLab) -> None:
    for verb in ("logs", "stop", "start", "config"):
        res = gd(lab, "lab", verb, "nod1")
        assert res.exit_code == 2, verb
        assert "no node 'nod1' in the lab" in res.output and "did you mean 'node1'?" in res.output
    res = gd(lab, "lab", "restart", "tp_grup")
    assert res.exit_code == 2 and "no node or group 'tp_grup'" in res.output
    assert "did you mean 'tp_group'?" in res.output
    assert lab.restarted == []


def test_restart_groups_and_nodes_together(lab: FakeLab) -> None:
    assert gd(lab, "lab", "restart", "tp_group").exit_code == 0
    assert gd(lab, "lab", "restart", "serving", "node2", "serving").exit_code == 0
    assert gd(lab, "lab", "restart", "all").exit_code == 0
    assert lab.restarted == [
        ["node1", "node2"],
        ["serving", "node2"],
        ["serving", "node1", "node2"],
    ]


def test_stop_keeps_the_node_stopped_until_start(lab: FakeLab) -> None:
    assert gd(lab, "lab", "stop", "node2").exit_code == 0
    st = lab.states()["node2"]
    assert (st.status, st.ready, st.generation) == (NodeStatus.EXITED, False, 0)
    assert gd(lab, "lab", "start", "node2").exit_code == 0
    st = lab.states()["node2"]
    assert (st.status, st.ready, st.generation) == (NodeStatus.RUNNING, True, 1)
    assert gd(lab, "lab", "start", "node2").exit_code == 0  # running: left as it is
    assert lab.states()["node2"].generation == 1


def test_logs_previous_after_a_failing_config(lab: FakeLab) -> None:
    assert gd(lab, "lab", "config", "serving", "--set-arg", "--max-model-len=99999").exit_code == 0
    res = gd(lab, "lab", "logs", "serving", "--previous")
    assert res.exit_code == 0
    assert res.output.splitlines() == list(WRONG_FLAG_LOGS)


def test_logs_follow_prints_new_incarnations_until_ctrl_c(lab: FakeLab) -> None:
    waits: list[int] = []

    def on_call(name: str) -> None:
        if name != "wait_events":
            return
        waits.append(1)
        if len(waits) == 1:
            lab.restart(["serving"])  # a new incarnation logs its lines
        elif len(waits) == 3:
            raise KeyboardInterrupt

    lab.on_call = on_call
    res = gd(lab, "lab", "logs", "serving", "-f")
    assert res.exit_code == 0
    assert res.output.splitlines() == ["INFO:     Application startup complete."] * 2


def test_a_lab_that_is_not_up_is_exit_3(lab: FakeLab) -> None:
    lab.down()
    for args in (["ps"], ["logs", "serving"], ["restart", "serving"], ["config", "serving"]):
        res = gd(lab, "lab", *args)
        assert res.exit_code == 3
        assert (
            f"lab 'fake' is not up\n  hint: gameday lab up --lab {lab.inventory.path}" in res.output
        )


def test_verbs_are_listed_in_help() -> None:
    res = CliRunner().invoke(main, ["lab", "--help"])
    for verb in ("ps", "logs", "restart", "stop", "start", "config"):
        assert f"  {verb} " in res.output


def test_each_change_a_verb_makes_is_marked_for_a_drill(lab: FakeLab) -> None:
    from runner.drill import verb_log
    from runner.results.drill_record import ActionKind

    for args in (
        ["lab", "restart", "serving"],
        ["lab", "stop", "node1"],
        ["lab", "start", "node1"],
        ["lab", "config", "serving", "--set-arg", "--max-model-len=4096"],
    ):
        assert gd(lab, *args).exit_code == 0
    assert gd(lab, "lab", "ps").exit_code == 0  # reads only: nothing to mark
    marks = verb_log.read(lab.state_dir)
    assert [(m.verb, sorted(m.nodes)) for m in marks] == [
        ("restart", ["serving"]),
        ("stop", ["node1"]),
        ("start", ["node1"]),
        ("config", ["serving"]),
    ]
    assert all(m.end is not None and m.begin <= m.end for m in marks)
    restart = marks[0]
    assert restart.end is not None
    assert restart.covers(ActionKind.RESTART, ["serving"], restart.end)
    assert not restart.covers(ActionKind.CONFIG_CHANGE, ["serving"], restart.end)
    assert not restart.covers(ActionKind.RESTART, ["serving", "node1"], restart.end)
