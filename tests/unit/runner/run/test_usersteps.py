"""User-written steps in a run, on the fake lab: what a step's outcome makes of the verdict, that
its undo is journalled before it runs, and that cleanup re-applies the baseline after a step that
has no undo. The steps themselves are scripted here (tests/integration runs real ones)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.labs.base import Change, ChangeKind, NodeConfig
from runner.labs.fake import FakeLab
from runner.results.schema import Phase, Verdict
from runner.run import journal, run_scenario
from runner.run import stepexec as runner_side
from runner.run.stepexec import StepRun
from runner.spec.usersteps import AnyUserStep, CommandStep, describe_user_step
from tests.support.fakelab import FakeRun, fake_run, scenario_doc, wrong_flag

ROLL_BACK = {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]}
HOPE = {
    "name": "Restart and hope",
    "outcome": "does_not_restore",
    "actions": [{"kind": "restart", "nodes": ["serving"]}],
}


def command(*argv: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "command", "argv": list(argv), **kw}


def set_wrong_flag(lab: FakeLab) -> None:
    """What a team's script does behind the journal's back: re-apply serving with a bad flag."""
    now = lab.config("serving")
    bad = NodeConfig(args=(*now.args, "--max-model-len", "99999"), env=now.env)
    lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=now, after=bad))


def scripted(
    monkeypatch: pytest.MonkeyPatch,
    run: FakeRun,
    outcomes: dict[str, StepRun] | None = None,
    effects: dict[str, Callable[[FakeLab], None]] | None = None,
) -> list[tuple[str, int]]:
    """Replace the running of a user step: each step's argv[0] picks its outcome (and an effect
    on the lab). Returns (argv[0], open journal entries as it ran) per call."""
    calls: list[tuple[str, int]] = []

    def fake(step: AnyUserStep, **_kw: Any) -> StepRun:
        assert isinstance(step, CommandStep)
        calls.append((step.argv[0], len(journal.open_steps(run.lab.state_dir))))
        (effects or {}).get(step.argv[0], lambda _lab: None)(run.lab)
        return (outcomes or {}).get(step.argv[0], StepRun(True, "exit 0"))

    monkeypatch.setattr(runner_side, "run_step", fake)
    monkeypatch.setattr("runner.run.apply.run_step", fake)
    return calls


def test_an_undo_is_journalled_before_its_step_runs_and_run_by_a_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = scenario_doc()
    doc["inject"].append(command("./fault.sh", undo=command("./unfault.sh", "--all")))
    run = fake_run(tmp_path, doc, wrong_flag())
    calls = scripted(monkeypatch, run)
    result = run.run()
    # the step ran with its own journal entry already on disk; its undo ran once, in the
    # rollback of recover 2 ("put back everything this run changed"), and cleanup had none left
    assert calls == [("./fault.sh", 1), ("./unfault.sh", 1)]
    assert result.verdict is Verdict.PASSED
    assert result.notes == [
        "recover 2 ran the undo of command ./fault.sh (timeout 60 s): "
        "command ./unfault.sh --all (timeout 60 s): ok, exit 0"
    ]
    assert journal.open_steps(run.lab.state_dir) == []
    assert run.open_changes() == 0 and run.lab.leftovers() == []


def test_an_injected_step_without_undo_makes_cleanup_reapply_the_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = scenario_doc(inject=[command("./break.py")], recover=[HOPE, ROLL_BACK])
    run = fake_run(tmp_path, doc, wrong_flag())
    scripted(monkeypatch, run, {}, {"./break.py": set_wrong_flag})
    result = run.run()
    # nothing journalled a change, yet the rollback step put serving back (cleanup then finds
    # nothing left to do: the step's journal entry is closed)
    assert [(a.name, a.verdict) for a in result.assertions if a.phase is Phase.RECOVER] == [
        ("recover 1: Restart and hope: does NOT restore service", Verdict.PASSED),
        ("recover 2: Roll back: restores service", Verdict.PASSED),
    ]
    assert result.verdict is Verdict.PASSED
    assert result.notes == [
        "recover 2 re-applied the baseline of serving: an injected command has no undo"
    ]
    assert run.lab.config("serving") == run.lab.baseline_config("serving")
    assert run.lab.leftovers() == []


def test_a_failing_user_step_fails_a_restoring_step_and_passes_a_shortcut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = scenario_doc(
        recover=[
            {"name": "Quick fix", "outcome": "does_not_restore", "actions": [command("./quick")]},
            {
                "name": "Runbook",
                "outcome": "restores",
                "actions": [command("./fix"), ROLL_BACK["actions"][0]],
            },
        ]
    )
    run = fake_run(tmp_path, doc, wrong_flag())
    boom = StepRun(False, "exit 2 (expected 0); last output: boom")
    calls = scripted(monkeypatch, run, {"./quick": boom, "./fix": boom})
    result = run.run()
    steps = [(a.name, a.verdict, a.observed) for a in result.assertions if "itself" in a.name]
    assert steps == [
        (
            "recover 1: Quick fix: the step itself failed: command ./quick (timeout 60 s)",
            Verdict.PASSED,
            "exit 2 (expected 0); last output: boom",
        ),
        (
            "recover 2: Runbook: the step itself failed: command ./fix (timeout 60 s)",
            Verdict.FAILED,
            "exit 2 (expected 0); last output: boom",
        ),
    ]
    # the failing step's remaining action (the rollback) did not run: service stayed down
    restores = next(
        a for a in result.assertions if a.name == "recover 2: Runbook: restores service"
    )
    assert restores.verdict is Verdict.FAILED
    assert result.verdict is Verdict.FAILED
    assert [c[0] for c in calls] == ["./quick", "./fix"]
    # both steps ran without an undo: cleanup checked the baseline, after the journal's undo of
    # the injected flag, which the note names as the timeline shows it
    assert result.notes == [
        "cleanup found every node at its baseline once it had restored serving from the journal "
        "(recover 1 ran a command, which may change the lab behind the journal's back)",
        "cleanup found every node at its baseline once it had restored serving from the journal "
        "(recover 2 ran a command, which may change the lab behind the journal's back)",
    ]
    assert [e.event for e in result.timeline if e.event.startswith("cleanup: restore")] == [
        "cleanup: restore serving: args Qwen/Qwen2.5-0.5B-Instruct --port 8000 --max-model-len "
        "99999 -> Qwen/Qwen2.5-0.5B-Instruct --port 8000"
    ]
    assert run.lab.leftovers() == []


def test_a_failing_injected_step_is_an_error_and_cleanup_undoes_what_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = scenario_doc()
    doc["inject"].append(command("./more-fault", undo=command("./unfault")))
    run = fake_run(tmp_path, doc, wrong_flag())
    timed_out = StepRun(False, "timed out after 60 s: the process group was killed")
    calls = scripted(monkeypatch, run, {"./more-fault": timed_out})
    result = run.run()
    assert [(a.phase, a.name, a.verdict, a.observed) for a in result.assertions[2:]] == [
        (
            Phase.INJECT,
            "inject: command ./more-fault (timeout 60 s)",
            Verdict.ERROR,
            "timed out after 60 s: the process group was killed",
        )
    ]
    assert result.verdict is Verdict.ERROR
    assert [c[0] for c in calls] == ["./more-fault", "./unfault"]  # its undo still ran
    assert result.notes == [
        "cleanup ran the undo of command ./more-fault (timeout 60 s): "
        "command ./unfault (timeout 60 s): ok, exit 0"
    ]
    assert run.lab.leftovers() == [] and run.open_changes() == 0


def test_a_recovery_step_that_leaves_drift_gets_the_baseline_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fix_with_a_seed(lab: FakeLab) -> None:
        now = lab.config("serving")
        fixed = lab.baseline_config("serving")
        fixed = NodeConfig(args=(*fixed.args, "--seed", "7"), env=fixed.env)
        lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=now, after=fixed))

    fix = {"name": "Script", "outcome": "restores", "actions": [command("./fix")]}
    run = fake_run(tmp_path, scenario_doc(recover=[HOPE, fix]), wrong_flag())
    scripted(monkeypatch, run, {}, {"./fix": fix_with_a_seed})
    result = run.run()
    assert result.verdict is Verdict.PASSED
    # the journalled set_args undo already returns serving to its baseline
    assert run.lab.config("serving") == run.lab.baseline_config("serving")
    assert result.notes == [
        "cleanup found every node at its baseline once it had restored serving from the journal "
        "(recover 2 ran a command, which may change the lab behind the journal's back)"
    ]


def test_describe_user_step_is_one_line() -> None:
    from runner.spec.usersteps import Http, Playbook

    assert (
        describe_user_step(CommandStep(kind="command", argv=["./fix.sh", "--node", "serving"]))
        == "command ./fix.sh --node serving (timeout 60 s)"
    )
    pb = Playbook(kind="playbook", playbook="kv.yaml", limit="serving", tags=["kv"], name="KV")
    assert (
        describe_user_step(pb) == "KV: playbook kv.yaml --limit serving --tags kv (timeout 600 s)"
    )
    http = Http(kind="http", method="POST", path="/admin/reset", expect_status=204)
    assert describe_user_step(http) == "http POST target/admin/reset (expect 204, timeout 30 s)"


def test_http_steps_against_the_fake_lab(tmp_path: Path) -> None:
    """Real HTTP steps (the fake lab answers in-process): the undo's node is journalled as the
    scenario's target, so that `gameday cleanup` can run it; a wrong status fails the step."""
    drain = {"kind": "http", "method": "POST", "path": "/admin/drain", "json": {"all": True}}
    drain["undo"] = {"kind": "http", "method": "POST", "path": "/admin/undrain"}
    ready = {"kind": "http", "method": "POST", "path": "/admin/ready", "expect_status": 204}
    fix = {"name": "Fix", "outcome": "restores", "actions": [{"kind": "rollback"}, ready]}
    doc = scenario_doc(recover=[HOPE, fix])
    doc["inject"].insert(0, drain)  # while serving serves: the wrong flag then stops it
    run = fake_run(tmp_path, doc, wrong_flag())
    result = run.run()
    records = [json.loads(ln) for ln in (run.journal_dir / "journal" / "run-1.jsonl").open()]
    undo = next(r["undo"] for r in records if r["op"] == "step" and r["undo"])
    assert (undo["node"], undo["path"]) == ("serving", "/admin/undrain")
    assert [(a.name, a.verdict, a.observed) for a in result.assertions if "itself" in a.name] == [
        (
            "recover 2: Fix: the step itself failed: "
            "http POST target/admin/ready (expect 204, timeout 30 s)",
            Verdict.FAILED,
            "HTTP 200 (expected 204); body: (none)",
        )
    ]
    assert "inject: http: HTTP 200" in [e.event for e in result.timeline]
    assert result.notes[0] == (
        "recover 2 ran the undo of http POST target/admin/drain (expect 200, timeout 30 s): "
        "http POST serving/admin/undrain (expect 200, timeout 30 s): ok, HTTP 200"
    )
    assert result.verdict is Verdict.FAILED
    assert run.lab.leftovers() == [] and journal.open_steps(run.lab.state_dir) == []


def test_undo_runs_newest_first_among_the_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """inject: a flag, then a step, then the fault. Its undo runs after the fault's change is
    undone and before the first flag's: it sees the lab as its step left it."""
    seed = {"kind": "set_args", "node": "serving", "args": {"--seed": 1}}
    fault = {"kind": "set_args", "node": "serving", "args": {"--max-model-len": 99999}}
    doc = scenario_doc(
        inject=[seed, command("./step", undo=command("./unstep")), fault],
        recover=[HOPE, ROLL_BACK],
    )
    run = fake_run(tmp_path, doc, wrong_flag())
    seen: list[tuple[str, ...]] = []
    scripted(
        monkeypatch, run, {}, {"./unstep": lambda lab: seen.append(lab.config("serving").args)}
    )
    result = run.run()
    assert result.verdict is Verdict.PASSED
    base = run.lab.baseline_config("serving").args
    assert seen == [(*base, "--seed", "1")]
    assert run.lab.config("serving").args == base


def test_a_restoring_step_that_does_not_restore_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed assertion names the probe that failed and what it got, and quotes the team's
    own step: its last line in `observed` (the terminal's and JUnit's one line), its output's
    tail in `detail`."""
    script = {
        "name": "Runbook script",
        "outcome": "restores",
        "actions": [command("./fix"), ROLL_BACK["actions"][0]],
    }
    doc = scenario_doc(recover=[script])
    doc["verify"]["probes"] = [{"kind": "http", "path": "/health", "expect_status": 204}]
    run = fake_run(tmp_path, doc, wrong_flag())
    said = "\n".join(f"line {i}" for i in range(30)) + "\nserving restarted, please check\n\n"
    scripted(monkeypatch, run, {"./fix": StepRun(True, "exit 0", said)})
    result = run.run()
    restores = next(a for a in result.assertions if a.name.endswith("restores service"))
    assert restores.verdict is Verdict.FAILED
    assert restores.observed == (
        "not restored: node running, ready=True; probe GET /health failed: HTTP 200; "
        "the step's last output: serving restarted, please check"
    )
    assert restores.detail.splitlines() == [
        "the step's output (its last lines):",
        *(f"line {i}" for i in range(11, 30)),
        "serving restarted, please check",
    ]


def test_time_to_recover_without_a_restart_counts_from_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix that brings service back without restarting the node (an admin call, a script)
    is timed from the step, and says so: no "new incarnation" that never started."""
    import httpx

    broken = {"now": False}

    def breaks(_lab: FakeLab) -> None:
        broken["now"] = True

    def fixes(_lab: FakeLab) -> None:
        broken["now"] = False

    doc = scenario_doc(
        inject=[command("./break", undo=command("./fix"))],
        recover=[{"name": "Script", "outcome": "restores", "actions": [command("./fix")]}],
    )
    doc["expect"] = {
        "failure": "silent",
        "probes": [{"kind": "inference", "prompt": "Say OK.", "expect": "unavailable"}],
        "time_to_fail": {"max_s": 60},
    }
    run = fake_run(tmp_path, doc)
    scripted(monkeypatch, run, {}, {"./break": breaks, "./fix": fixes})

    def answer(request: httpx.Request) -> httpx.Response:
        if broken["now"] and request.url.path == "/v1/chat/completions":
            return httpx.Response(503)
        return run.lab.transport.handle_request(request)

    client = httpx.Client(transport=httpx.MockTransport(answer))
    jr = journal.Journal(run.lab.state_dir, "r")
    result = run_scenario(run.ls, run.lab, jr, print, http=client)
    ttr = next(a for a in result.assertions if a.name == "verify: time to recover")
    assert ttr.verdict is Verdict.PASSED, result.assertions
    assert ttr.observed.endswith(" s real (the step applied -> probes pass)"), ttr.observed
    assert run.lab.states()["serving"].incarnation == 1  # never restarted
