"""The CLI from a team's own repository: a `gameday.toml` in a temporary team folder names the
team's scenarios and lab; run from a folder below it (outside gameday's checkout), `list`,
`validate`, `plan` (and `run --dry-run`) and `triage` work. Also: a wheel carries the built-in
catalogue and the default lab."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runner.report import write_reports
from runner.results.schema import Verdict
from runner.spec.catalogue import builtin_dir
from tests.support.cli import ROOT, SHIPPED, gameday, scenario_variant, variant
from tests.support.results import run_result, scenario_result
from tests.support.seedlogs import SEED_019


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """The team's repository: chaos/our-kv-cache.yaml (a copy of kv-cache-shortage under a new
    id), lab/local.yaml (the local lab, named team-lab) and gameday.toml naming both."""
    assert not tmp_path.is_relative_to(ROOT)
    root = tmp_path / "team"
    (root / "chaos").mkdir(parents=True)
    (root / "lab").mkdir()
    (root / "src").mkdir()
    scenario_variant(root / "chaos", "scenarios/kv-cache-shortage.yaml", "our-kv-cache")
    variant(ROOT / "inventories" / "local.yaml", root / "lab", {"name: local": "name: team-lab"})
    (root / "gameday.toml").write_text(
        '# the team\'s gameday settings\nscenarios = ["chaos"]\nlab = "lab/local.yaml"\n'
        'reports = "out"\n'
    )
    return root


def run(team: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return gameday(*args, cwd=team / "src", timeout=120, **kw)  # type: ignore[arg-type]


def test_list(team: Path) -> None:
    p = run(team, "list", "--json")
    assert p.returncode == 0, p.stderr
    rows = [(r["id"], r["source"], r["overrides_builtin"]) for r in json.loads(p.stdout)]
    own = str(team / "chaos" / "our-kv-cache.yaml")
    assert rows == [("our-kv-cache", own, False), *((sid, "builtin", False) for sid in SHIPPED)]
    text = run(team, "list", "-k", "kv")
    assert [line.split()[0] for line in text.stdout.splitlines()] == [
        "our-kv-cache",
        "cuda-graph-capture-oom",  # its description speaks of the KV cache
        "kv-cache-shortage",
        "pd-kv-handshake",  # a KV-cache transfer
    ]
    assert text.stdout.splitlines()[0].endswith(f"[{own}]")
    assert text.stdout.splitlines()[2].endswith("[builtin]")


def test_a_team_file_overrides_a_builtin_id(team: Path) -> None:
    scenario_variant(team / "chaos", "scenarios/tp-mismatch.yaml", "tp-mismatch")
    p = run(team, "list")
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if line.startswith("tp-mismatch ")]
    assert len(lines) == 1
    assert lines[0].endswith(f"[{team / 'chaos' / 'tp-mismatch.yaml'} (overrides builtin)]")


def test_validate(team: Path) -> None:
    p = run(team, "validate")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"ok  {team / 'chaos' / 'our-kv-cache.yaml'}",
        f"ok  {team / 'lab' / 'local.yaml'}",
    ]
    by_id = run(team, "validate", "our-kv-cache", "tp-mismatch")
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.splitlines() == [
        f"ok  {team / 'chaos' / 'our-kv-cache.yaml'}",
        f"ok  {builtin_dir() / 'tp-mismatch.yaml'}",
    ]
    typo = run(team, "validate", "our-kv-cach")
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == [
        "error: 'our-kv-cach' is neither a scenario file nor a scenario id",
        "  hint: did you mean 'our-kv-cache'?",
    ]


def test_plan_uses_the_configured_lab_and_the_command_line_wins(team: Path) -> None:
    p = run(team, "plan", "our-kv-cache", "--json")
    assert p.returncode == 0, p.stderr
    [plan] = json.loads(p.stdout)
    assert (plan["id"], plan["lab"], plan["not_on_this_lab"]) == ("our-kv-cache", "team-lab", [])
    env = {"GAMEDAY_LAB": str(ROOT / "inventories" / "compose.yaml")}
    assert json.loads(run(team, "plan", "our-kv-cache", "--json", env=env).stdout)[0]["lab"] == (
        "compose"
    )
    kube = str(ROOT / "inventories" / "kube-testserver.yaml")
    over = run(team, "plan", "dhcp-address-change", "--lab", kube, "--json", env=env)
    [plan] = json.loads(over.stdout)
    assert (plan["lab"], plan["not_on_this_lab"]) == (
        "kube-testserver",
        ["not on this lab: applies to local, compose only"],
    )


def test_run_dry_run_touches_nothing(team: Path) -> None:
    p = run(team, "run", "--dry-run", "-k", "our")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == (
        "our-kv-cache on lab team-lab (local): KV-cache shortage after the weights load "
        "(the second wall)"
    )
    assert not (team / "out").exists()


def test_triage(team: Path) -> None:
    log = team / "prev.log"
    log.write_text(SEED_019["kv-cache-shortage"])
    p = run(team, "triage", str(log), "--json")
    assert p.returncode == 0, p.stderr
    [entry] = json.loads(p.stdout)
    assert [f["scenario"] for f in entry["findings"]] == ["our-kv-cache", "kv-cache-shortage"]


def test_a_bad_configuration_is_exit_2_with_its_line(team: Path) -> None:
    (team / "gameday.toml").write_text('scenarios = ["chaos"]\nlabs = "lab/local.yaml"\n')
    p = run(team, "list")
    assert p.returncode == 2
    assert p.stderr.splitlines()[0] == f"error: {team / 'gameday.toml'}:2 [labs]: unknown key"


def test_the_wheel_carries_the_catalogue(tmp_path: Path) -> None:
    """Built from a copy of the sources (setuptools writes build/ next to them), with the
    catalogue's link kept a link."""
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in (
        "runner",
        "labengine",
        "vllmfacts",
        "scenarios",
        "inventories",
        "compose",
        "playbooks",
    ):
        shutil.copytree(ROOT / name, src / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    assert (src / "runner" / "builtin_scenarios").is_symlink()
    assert (src / "runner" / "builtin_labs").is_symlink()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("gameday-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n for n in names if n.startswith("runner/builtin_scenarios/")) == [
        f"runner/builtin_scenarios/{sid}.yaml" for sid in SHIPPED
    ]
    # the default lab, and only it: the other inventories name files outside the package
    assert sorted(n for n in names if n.startswith("runner/builtin_labs/")) == [
        "runner/builtin_labs/local.yaml"
    ]
    assert "runner/spec/starter_files/set-model.sh" in names
    # the compose lab's Dockerfile, compose file and playbooks: `gameday lab build` and `lab up`
    # from an installed package
    playbooks = [f"playbooks/{p.name}" for p in sorted((ROOT / "playbooks").glob("*.yaml"))]
    assert playbooks
    for name in ("data/Dockerfile", "data/compose.yaml", *playbooks):
        assert f"runner/labs/compose/{name}" in names, name


def test_selection_errors_and_last_failed(team: Path) -> None:
    bad = run(team, "list", "-k", "kv and")
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[0] == (
        "error: [-k]: expected a word, `not` or `(`; the expression ended at column 7 of 'kv and'"
    )
    last = run_result(
        scenario_result(id="our-kv-cache", verdict=Verdict.FAILED),
        scenario_result(id="tp-mismatch", verdict=Verdict.PASSED),
        run_id="20261130T120000Z-cccccc",
    )
    write_reports(last, team / "out" / last.run_id)
    p = run(team, "plan", "--last-failed")
    assert p.returncode == 0, p.stderr
    assert [line for line in p.stdout.splitlines() if not line.startswith(" ")] == [
        "our-kv-cache on lab team-lab (local): KV-cache shortage after the weights load "
        "(the second wall)",
        "--parallel auto would run 1 instance(s): 1 scenario(s) apply",
    ]
    assert p.stderr.splitlines() == [
        f"--last-failed: 1 that failed in {team / 'out' / last.run_id}"
    ]
