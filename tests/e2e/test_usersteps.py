"""User-written steps on the local lab: a `command` injects the fault (with an undo), a
`does_not_restore` command (a health check that fails on purpose) is shown not to restore, a
`restores` command fixes it, and the lab is left at its baseline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.labs.local.driver import LocalLab
from runner.run import journal
from runner.spec.inventory_load import load_inventory
from tests.support.cli import gameday, inventory, ok

pytestmark = pytest.mark.e2e

# Each script reaches the lab through its facts (GAMEDAY_LAB, GAMEDAY_NODE_SERVING_URL), as a
# team's own tooling would; gameday's driver stands in for their kubectl or docker here.
BREAK = """
import os
from runner.spec.inventory_load import load_inventory
from runner.labs.local.driver import LocalLab
from runner.labs.common.planning import plan_change
from runner.spec.actions import SetArgs

lab = LocalLab(load_inventory(os.environ["GAMEDAY_LAB"]))
wrong = SetArgs(kind="set_args", node="serving", args={"--max-model-len": 131072})
lab.apply(plan_change(lab, wrong))
print("serving re-applied with --max-model-len 131072")
"""
FIX = """
import os
from runner.spec.inventory_load import load_inventory
from runner.labs.base import Change, ChangeKind
from runner.labs.local.driver import LocalLab

lab = LocalLab(load_inventory(os.environ["GAMEDAY_LAB"]))
now, base = lab.config("serving"), lab.baseline_config("serving")
if now != base:
    lab.apply(Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=now, after=base))
print("serving back at its baseline" if now != base else "serving already at its baseline")
"""
CHECK = """
import os, sys, httpx
try:
    r = httpx.get(os.environ["GAMEDAY_NODE_SERVING_URL"] + "/health", timeout=2)
    status = str(r.status_code)
except httpx.HTTPError as exc:
    status = type(exc).__name__
print("health:", status)
sys.exit(0 if status == "200" else 1)
"""
SCENARIO = """
apiVersion: gameday/v1
kind: Scenario
metadata: {id: user-steps-e2e, title: A team's own scripts inject and fix}
labs: [local]
target: serving
baseline:
  probes:
    - {kind: http, path: /health}
inject:
  - kind: command
    name: their break script
    argv: [python3, scripts/break.py]
    undo: {kind: command, argv: [python3, scripts/fix.py]}
expect:
  signature:
    in_order:
      - regex: 'User-specified max_model_len \\((?P<n>\\d+)\\)'
        captures: {n: {eq: 131072}}
  exit_code: 1
  time_to_fail: {max_s: 60}
recover:
  - name: Check health and hope
    outcome: does_not_restore
    settle_s: 30
    actions:
      - {kind: command, argv: [python3, scripts/check.py], timeout_s: 30}
  - name: Run the runbook's fix
    outcome: restores
    runbook: runbook.md
    actions:
      - {kind: command, argv: [python3, scripts/fix.py], expect_output: [back at its baseline]}
verify:
  probes:
    - {kind: http, path: /health}
    - {kind: inference, prompt: "Answer only OK.", max_tokens: 64}
  time_to_recover: {max_s: 600}
"""


def test_command_steps_inject_fail_and_fix_on_the_local_lab(
    tmp_path: Path, lab_down_after: list[Path]
) -> None:
    team = tmp_path / "team"
    (team / "scripts").mkdir(parents=True)
    for name, text in (("break.py", BREAK), ("fix.py", FIX), ("check.py", CHECK)):
        (team / "scripts" / name).write_text(text)
    (team / "runbook.md").write_text("# KV cache\n")
    (team / "scenario.yaml").write_text(SCENARIO)
    inv = inventory(tmp_path, "127.0.78.71")
    lab_down_after.append(inv)
    ok(gameday("lab", "up", "--lab", str(inv), timeout=120))  # up before: the run leaves it up
    reports = tmp_path / "reports"
    p = gameday(
        "run",
        str(team / "scenario.yaml"),
        "--lab",
        str(inv),
        "--reports",
        str(reports),
        timeout=300,
        cwd=team,  # the team's repository: the reports name its files from there
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (run_dir,) = [d for d in reports.iterdir() if d.is_dir() and d.name != "latest"]
    result = json.loads((run_dir / "result.json").read_text())["scenarios"][0]
    verdicts = {a["name"]: (a["verdict"], a["observed"]) for a in result["assertions"]}
    assert (
        verdicts[
            "recover 1: Check health and hope: the step itself failed: "
            "command python3 scripts/check.py (timeout 30 s)"
        ][0]
        == "passed"
    )
    assert verdicts["recover 1: Check health and hope: does NOT restore service"][0] == "passed"
    assert verdicts["recover 2: Run the runbook's fix: restores service"] == ("passed", "restored")
    assert result["runbooks"] == {"recover 2: Run the runbook's fix": "runbook.md"}
    assert result["notes"] == [
        "cleanup ran the undo of their break script: command python3 scripts/break.py "
        "(timeout 60 s): command python3 scripts/fix.py (timeout 60 s): ok, exit 0",
        "cleanup found every node at its baseline (recover 1 ran a command, which may change "
        "the lab behind the journal's back)",
        "cleanup found every node at its baseline (recover 2 ran a command, which may change "
        "the lab behind the journal's back)",
    ]
    timeline = [e["event"] for e in result["timeline"] if e["source"] == "runner"]
    assert "inject: their break script: exit 0" in timeline
    assert (
        "- runbook of recover 2: Run the runbook's fix: runbook.md"
        in (run_dir / "report.md").read_text()
    )
    lab = LocalLab(load_inventory(inv))
    assert lab.leftovers() == []
    assert journal.open_steps(lab.state_dir) == [] and journal.open_changes(lab.state_dir) == []
