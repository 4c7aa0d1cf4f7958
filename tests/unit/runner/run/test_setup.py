"""A baseline's `setup`, on the fake lab: applied after the at-baseline check and before the
probes, journalled like an injection (undone by the run's cleanup, or by `gameday cleanup` after a
killed run), its failure an error; and the correctness reference recorded at that baseline, which
later probes compare with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.labs.base import ChangeKind
from runner.labs.common.planning import plan_change
from runner.results.schema import EventKind, ScenarioResult, Verdict
from runner.run.context import Context
from runner.run.journal import Journal
from runner.run.phases.baseline import baseline
from runner.run.record import Recorder
from runner.run.undo import cleanup_lab
from runner.spec.actions import SetArgs
from runner.spec.timing import TimeScale
from tests.support.fakelab import HEALTH, fake_run, scenario_doc

JAMBA = "gameday-lab/jamba-hybrid-1b"
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"  # the fake inventory's model for `serving`
CORRECT = {"kind": "correctness", "prompts": ["a", "b"], "requests": 6, "concurrency": 3}


def model(name: str) -> dict[str, Any]:
    return {"kind": "set_args", "node": "serving", "args": {"model_tag": name}}


def silent_doc(**fields: Any) -> dict[str, Any]:
    """Setup serves JAMBA; the fault serves another model, whose answers are wrong alike serial
    or under load (only a reference from before the fault shows it); the fix serves JAMBA."""
    doc = scenario_doc(
        baseline={"setup": [model(JAMBA)], "probes": [HEALTH, CORRECT]},
        inject=[model("other/model")],
        expect={
            "failure": "silent",
            "probes": [HEALTH, {**CORRECT, "expect": "diverges"}],
            "time_to_fail": {"max_s": 600},
        },
        recover=[
            {"name": "Serve the right model", "outcome": "restores", "actions": [model(JAMBA)]}
        ],
        verify={"probes": [HEALTH, CORRECT], "time_to_recover": {"max_s": 600}},
    )
    doc.update(fields)
    return doc


def by_name(result: ScenarioResult) -> dict[str, Any]:
    return {a.name: a for a in result.assertions}


def test_the_reference_recorded_at_the_setup_baseline_catches_a_fault_a_serial_pass_cannot(
    tmp_path: Path,
) -> None:
    run = fake_run(tmp_path, silent_doc())
    result = run.run()
    got = by_name(result)
    assert result.verdict is Verdict.PASSED, [(a.name, a.observed) for a in result.assertions]
    assert got["baseline: setup"].observed == f"set_args on serving: model {JAMBA}"
    probe = "correctness under load (6 requests, 3 at a time)"
    assert "as its own serial pass, kept as this run's reference" in (
        got[f"baseline: {probe}"].observed
    )
    caught = got[f"expect: {probe}"].observed
    assert caught.startswith("6 of 6 requests diverged; the first after 1 requests; ")
    assert f"'other/model: a' (reference '{JAMBA}: a' from cmpl-gameday-ref-" in caught
    assert "compared with the reference recorded at baseline 20" in caught
    assert "logprob as the reference recorded at baseline" in got[f"verify: {probe}"].observed
    # the setup is on the timeline as such, before the injection
    kinds = [e.kind for e in result.timeline if e.kind in (EventKind.SETUP, EventKind.INJECT)]
    assert kinds == [EventKind.SETUP, EventKind.INJECT]
    setup = next(e for e in result.timeline if e.kind is EventKind.SETUP)
    assert setup.event.startswith("setup: serving: args ")
    # cleanup undoes setup with the rest: the lab's own baseline, not the setup's
    assert run.lab.config("serving") == run.lab.baseline_config("serving")
    assert run.lab.config("serving").args[0] == QWEN
    assert run.lab.leftovers() == [] and run.open_changes() == 0


def test_without_a_baseline_reference_the_same_fault_goes_unseen(tmp_path: Path) -> None:
    doc = silent_doc(baseline={"setup": [model(JAMBA)], "probes": [HEALTH]})
    result = fake_run(tmp_path, doc).run()
    probe = "expect: correctness under load (6 requests, 3 at a time)"
    got = by_name(result)[probe]
    assert got.verdict is Verdict.FAILED
    assert got.expected == "some answer diverges from its own serial pass"


def test_the_at_baseline_check_runs_before_setup(tmp_path: Path) -> None:
    run = fake_run(tmp_path, silent_doc())
    left = plan_change(run.lab, SetArgs(kind="set_args", node="serving", args={"--seed": 1}))
    run.lab.apply(left)
    result = run.run()
    assert [(a.name, a.verdict) for a in result.assertions] == [("lab", Verdict.ERROR)]
    assert result.assertions[0].observed.startswith(
        "node serving is not at its baseline configuration"
    )
    assert run.lab.applied == [left]  # setup never ran


def test_a_failing_setup_is_an_error_and_cleanup_undoes_what_it_applied(tmp_path: Path) -> None:
    fails = {"kind": "http", "path": "/admin/warm", "expect_status": 204}
    doc = silent_doc(baseline={"setup": [model(JAMBA), fails], "probes": [HEALTH]})
    run = fake_run(tmp_path, doc)
    result = run.run()
    assert result.verdict is Verdict.ERROR
    first = result.assertions[0]
    assert (first.name, first.verdict, first.observed) == (
        "baseline: setup: http GET target/admin/warm (expect 204, timeout 30 s)",
        Verdict.ERROR,
        "HTTP 200 (expected 204); body: (none)",
    )
    assert first.expected == "the baseline's setup is applied"
    assert not any(a.verdict is Verdict.FAILED for a in result.assertions)
    assert not [e for e in result.timeline if e.kind is EventKind.INJECT]
    assert run.lab.config("serving") == run.lab.baseline_config("serving")
    assert run.lab.leftovers() == [] and run.open_changes() == 0


def test_a_lab_error_in_setup_is_an_error_named_setup(tmp_path: Path) -> None:
    from runner.errors import LabError

    run = fake_run(tmp_path, silent_doc())

    def refuse(name: str) -> None:
        if name == "apply node_config" and not run.lab.applied:
            raise LabError("the lab refused the change")

    run.lab.on_call = refuse
    result = run.run()
    first = result.assertions[0]
    assert (first.name, first.verdict, first.observed) == (
        "baseline: setup",
        Verdict.ERROR,
        "the lab refused the change",
    )
    assert result.verdict is Verdict.ERROR


def test_a_run_killed_after_setup_is_put_back_by_gameday_cleanup(tmp_path: Path) -> None:
    run = fake_run(tmp_path, silent_doc())
    lab = run.lab
    ctx = Context(
        lab=lab,
        scale=TimeScale.of(lab.inventory.lab),
        journal=Journal(lab.state_dir, "run-killed"),
        scenario_id="fake-startup",
        target="serving",
        progress=lambda _s: None,
        rec=Recorder(),
        http=httpx.Client(transport=lab.transport),
        seq=lab.last_event_seq(),
    )
    baseline(ctx, run.ls)  # then the runner dies: no cleanup phase
    assert lab.config("serving").args[0] == JAMBA
    assert run.open_changes() == 1
    out = cleanup_lab(lab)
    assert out.open_changes == 1
    assert [c.kind for c in out.applied] == [ChangeKind.NODE_CONFIG]
    assert lab.config("serving") == lab.baseline_config("serving")
    assert run.open_changes() == 0 and lab.leftovers() == []


def test_a_baseline_whose_probes_fail_after_setup_is_an_error(tmp_path: Path) -> None:
    from runner.labs.fake import Hangs, serves

    def jamba_never_serves(node: str, config: Any) -> Any:
        return Hangs() if config.args and config.args[0] == JAMBA else serves(node, config)

    run = fake_run(tmp_path, silent_doc(), jamba_never_serves)
    result = run.run()
    names = [(a.name, a.verdict) for a in result.assertions]
    assert names[:2] == [
        ("baseline: setup", Verdict.PASSED),
        ("baseline: target ready", Verdict.ERROR),
    ]
    assert run.lab.config("serving") == run.lab.baseline_config("serving")


@pytest.mark.parametrize("section", ["inject", "setup"])
def test_setup_keeps_a_user_steps_undo_as_inject_does(tmp_path: Path, section: str) -> None:
    step = {
        "kind": "http",
        "method": "POST",
        "path": f"/admin/{section}",
        "undo": {"kind": "http", "method": "POST", "path": f"/admin/undo-{section}"},
    }
    doc = silent_doc()
    if section == "setup":
        doc["baseline"]["setup"].append(step)
    else:
        doc["inject"].append(step)
    run = fake_run(tmp_path, doc)
    result = run.run()
    assert result.verdict is Verdict.PASSED, [(a.name, a.observed) for a in result.assertions]
    undone = [n for n in result.notes if f"/admin/undo-{section}" in n]
    assert len(undone) == 1 and "cleanup" in undone[0], result.notes
    assert run.open_changes() == 0


def test_without_setup_the_baseline_applies_nothing(tmp_path: Path) -> None:
    doc = silent_doc(baseline={"probes": [HEALTH, CORRECT]})
    run = fake_run(tmp_path, doc)
    result = run.run()
    assert "baseline: setup" not in by_name(result)
    assert not [e for e in result.timeline if e.kind is EventKind.SETUP]
    first = run.lab.applied[0]
    assert first.after.args[0] == "other/model"  # type: ignore[union-attr]  # inject's
