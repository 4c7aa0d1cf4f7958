"""`gameday init`: the files a new repository starts from, written without overwriting the team's,
and a configuration that runs them (the end-to-end run from a built wheel is
tests/e2e/test_fresh_install.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from runner.spec.config import load_config
from tests.support.cli import SHIPPED, gameday
from tests.support.seedlogs import SEED_019

WRITTEN = [
    "gameday.toml",
    "gameday/lab.yaml",
    "gameday/scenarios/example-model-typo.yaml",
    "gameday/scripts/set-model.sh",
    ".github/workflows/gameday.yml",
    "gameday/ci/gitlab-ci.yml",
]
PACKAGES = "prometheus prometheus-node-exporter prometheus-alertmanager"


def test_init_writes_a_repository_that_validates_and_lists(tmp_path: Path) -> None:
    r = gameday("init", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == WRITTEN
    assert "next: `gameday run`" in r.stderr
    script = tmp_path / "gameday" / "scripts" / "set-model.sh"
    assert script.stat().st_mode & stat.S_IXUSR and os.access(script, os.X_OK)
    cfg = load_config(tmp_path, {})
    assert (cfg.file, cfg.lab, cfg.scenarios, cfg.reports, cfg.builtin) == (
        tmp_path / "gameday.toml",
        tmp_path / "gameday" / "lab.yaml",
        (tmp_path / "gameday" / "scenarios",),
        tmp_path / "gameday-reports",
        True,
    )
    v = gameday("validate", cwd=tmp_path)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "ok  " + str(tmp_path / "gameday" / "scenarios" / "example-model-typo.yaml") in v.stdout
    assert "ok  " + str(tmp_path / "gameday" / "lab.yaml") in v.stdout
    listed = json.loads(gameday("list", "--json", cwd=tmp_path).stdout)
    assert [row["id"] for row in listed] == ["example-model-typo", *SHIPPED]
    # the example's recovery is the team's script, by a path relative to the scenario
    sc = yaml.safe_load((tmp_path / WRITTEN[2]).read_text())
    (action,) = sc["recover"][0]["actions"]
    assert action["kind"] == "command"
    assert action["argv"][0] == "../scripts/set-model.sh"


def test_init_refuses_to_overwrite_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "gameday.toml").write_text("# ours\n")
    r = gameday("init", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "gameday.toml" in errors[0], r.stderr
    assert "gameday init --force" in r.stderr
    assert (tmp_path / "gameday.toml").read_text() == "# ours\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gameday.toml"]
    forced = gameday("init", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "gameday.toml").read_text() != "# ours\n"
    assert all((tmp_path / f).is_file() for f in WRITTEN)


def test_the_ci_jobs_install_the_lab_run_and_keep_the_junit_file(tmp_path: Path) -> None:
    assert gameday("init", cwd=tmp_path).returncode == 0
    reports = load_config(tmp_path, {}).reports.name
    gh = yaml.safe_load((tmp_path / ".github/workflows/gameday.yml").read_text())
    steps = gh["jobs"]["gameday"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert f"apt-get install -y {PACKAGES}" in runs
    assert "pip install gameday" in runs
    assert "gameday run --junit gameday-junit.xml" in runs
    (upload,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload["if"] == "always()"
    assert upload["with"]["path"].split() == ["gameday-junit.xml", f"{reports}/"]
    gl = yaml.safe_load((tmp_path / "gameday/ci/gitlab-ci.yml").read_text())["gameday"]
    script = "\n".join(gl["script"])
    assert f"apt-get install -y {PACKAGES}" in script
    assert "pip install gameday" in script
    assert "gameday run --junit gameday-junit.xml" in script
    assert gl["artifacts"]["when"] == "always"
    assert gl["artifacts"]["reports"]["junit"] == "gameday-junit.xml"
    assert f"{reports}/" in gl["artifacts"]["paths"]


def test_builtin_false_runs_only_the_teams_scenarios_by_default(tmp_path: Path) -> None:
    assert gameday("init", cwd=tmp_path).returncode == 0
    toml = tmp_path / "gameday.toml"
    text = toml.read_text()
    assert "# builtin = false" in text
    toml.write_text(text.replace("# builtin = false", "builtin = false"))
    listed = json.loads(gameday("list", "--json", cwd=tmp_path).stdout)
    assert [row["id"] for row in listed] == ["example-model-typo"]
    plan = gameday("run", "--dry-run", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "example-model-typo" in plan.stdout
    assert not any(sid in plan.stdout for sid in SHIPPED)
    # a catalogue id named on the command line still runs
    named = json.loads(gameday("list", "--json", "tp-mismatch", cwd=tmp_path).stdout)
    assert [row["id"] for row in named] == ["tp-mismatch"]
    # triage still knows every failure the catalogue describes
    log = tmp_path / "prev.log"
    log.write_text(SEED_019["kv-cache-shortage"])
    found = json.loads(gameday("triage", str(log), "--json", cwd=tmp_path).stdout)
    assert "kv-cache-shortage" in [f["scenario"] for f in found[0]["findings"]]
