"""The example team repository (examples/team-repo), used as a team would: from a folder of its
own outside this checkout, with its gameday.toml, on the local lab and on its own Compose project
(created by the test with the Compose CLI, adopted by gameday). Its runbook steps are the ones
under test: a `command` step and a `playbook` step each recover a fault, a `command` restart is
shown not to restore, and an `http` step wakes an engine left asleep."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.labs.compose.build import docker_client
from runner.labs.compose.project import compose_command
from tests.support.cli import ROOT, gameday, ok

pytestmark = pytest.mark.e2e
EXAMPLE = ROOT / "examples" / "team-repo"
TEAM_IDS = ["team-engine-left-asleep", "team-kv-cache-runbook", "team-model-path-typo"]
STACK = "team-stack"


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """A copy of the team's repository in a temporary folder, away from this checkout."""
    dest = tmp_path / "team"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("gameday-reports"))
    return dest


def assertions(scenario: dict[str, Any]) -> dict[str, str]:
    return {a["name"]: a["verdict"] for a in scenario["assertions"]}


def check_runbook_run(result: dict[str, Any]) -> None:
    """The three team scenarios passed, each for the reason its runbook step says."""
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert sorted(by_id) == TEAM_IDS
    assert {i: s["verdict"] for i, s in by_id.items()} == dict.fromkeys(TEAM_IDS, "passed")
    kv = by_id["team-kv-cache-runbook"]
    got = assertions(kv)
    # the command step (`gameday lab restart serving`) ran and is shown not to restore ...
    assert got[
        "recover 1: Restart it (the first thing on-call tries): does NOT restore service"
    ] == ("passed")
    # ... and the playbook restores, its task on the timeline
    assert got["recover 2: Runbook step 2, the playbook: restores service"] == "passed"
    events = [t["event"] for t in kv["timeline"] if t["source"] == "ansible"]
    assert events == [
        'task "Set the sizing sheet\'s memory budget on the engine" on serving: changed'
    ]
    # the runbook and the scenario as the team's repository names them (gameday.toml's folder)
    assert kv["runbooks"]["recover 2: Runbook step 2, the playbook"] == (
        "runbooks/serving.md#kv-cache-shortage"
    )
    assert kv["file"] == "gameday/scenarios/kv-cache-runbook.yaml"
    typo = assertions(by_id["team-model-path-typo"])
    assert typo["recover 2: Correct the model name with our script: restores service"] == "passed"
    assert typo["expect: phase where it broke"] == "passed"
    asleep = assertions(by_id["team-engine-left-asleep"])
    assert asleep["expect: inference (chat) refused"] == "passed"
    assert asleep["recover 1: Wake it (runbook step 2): restores service"] == "passed"


def test_the_team_repository_on_the_local_lab(team: Path, lab_down_after: list[Path]) -> None:
    lab_down_after.append(team / "gameday" / "labs" / "local.yaml")
    here = team / "gameday" / "scenarios"  # anywhere inside the team's repository
    listed = json.loads(ok(gameday("list", "--json", cwd=here)).stdout)
    assert [r["id"] for r in listed][:3] == TEAM_IDS
    assert "kv-cache-shortage" in [r["id"] for r in listed]  # the built-in catalogue after
    ok(gameday("validate", "--lab", str(team / "gameday" / "labs" / "local.yaml"), cwd=here))
    plan = ok(gameday("plan", "team-kv-cache-runbook", cwd=here)).stdout
    assert "playbook ../../runbooks/fix-kv-cache.yaml --limit serving --tags fix" in plan
    r = gameday("run", "--tag", "runbook", "--json", cwd=here, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_runbook_run(json.loads(r.stdout))
    run = (team / "gameday-reports" / "latest").resolve()  # gameday.toml's reports folder
    assert sorted(p.name for p in run.parent.iterdir()) == sorted([run.name, "latest"])
    assert sorted(p.name for p in run.iterdir()) == [
        "junit.xml",
        "report.html",
        "report.md",
        "result.json",
    ]
    typo_log = team / "typo.log"
    typo_log.write_text(
        "ValueError: Invalid repository ID or local directory specified: "
        "'Qwen/Qwen2.5-14B-Instuct-AWQ'.\n"
    )
    found = json.loads(ok(gameday("triage", "--json", str(typo_log), cwd=here)).stdout)
    assert [f["scenario"] for f in found[0]["findings"]] == ["team-model-path-typo"]


def test_a_command_step_acts_on_its_own_instance_under_parallel(
    team: Path, lab_down_after: list[Path]
) -> None:
    """Three copies of the typo scenario on three instances of the team's lab: each one's
    set-model script (`gameday lab config`, the lab named by GAMEDAY_LAB) must correct its own
    instance. A script handed instance 0's inventory corrects instance 0 and leaves its own
    broken, so its scenario fails."""
    lab_down_after.append(team / "gameday" / "labs" / "local.yaml")
    here = team / "gameday" / "scenarios"
    source = (here / "model-path-typo.yaml").read_text()
    ids = ["team-model-path-typo", "team-typo-again", "team-typo-thrice"]
    for sid in ids[1:]:
        (here / f"{sid}.yaml").write_text(
            source.replace("id: team-model-path-typo\n", f"id: {sid}\n", 1)
        )
    r = gameday("run", *ids, "--parallel", "3", "--json", cwd=here, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout)
    assert result["lab"]["instances"] == 3
    by_id = {s["id"]: s for s in result["scenarios"]}
    assert {i: s["verdict"] for i, s in by_id.items()} == dict.fromkeys(ids, "passed")
    assert {s["lab"] for s in by_id.values()} == {"team-local", "team-local-p1", "team-local-p2"}
    for s in by_id.values():
        step = "recover 2: Correct the model name with our script: restores service"
        assert assertions(s)[step] == "passed", (s["lab"], assertions(s))


def stack_containers() -> list[dict[str, Any]]:
    found = docker_client().containers.list(
        all=True, filters={"label": f"com.docker.compose.project={STACK}"}
    )
    return [c.attrs for c in found]


@pytest.fixture
def stack(team: Path, lab_image: str) -> Iterator[Path]:
    """The team's Compose project, up, created by the Compose CLI as the team runs it."""
    cmd = [*compose_command(), "-p", STACK, "-f", str(team / "stack" / "compose.yaml")]
    subprocess.run([*cmd, "up", "-d"], check=True, capture_output=True, timeout=120)
    try:
        yield team / "gameday" / "labs" / "stack.yaml"
    finally:
        subprocess.run([*cmd, "down", "-v", "-t", "2"], check=True, capture_output=True)


def test_the_team_repository_on_its_adopted_compose_project(team: Path, stack: Path) -> None:
    (before,) = stack_containers()
    r = gameday("run", "--tag", "runbook", "--lab", str(stack), "--json", cwd=team, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    check_runbook_run(json.loads(r.stdout))
    (after,) = stack_containers()  # left as found: recreated with its own configuration
    for key in ("Cmd", "Env", "Labels", "Image"):
        assert after["Config"][key] == before["Config"][key], key
    assert after["State"]["Running"] is True
