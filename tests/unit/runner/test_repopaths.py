"""Paths in reports are the repository's (runner.results.repopaths), not one CI machine's."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runner.report import junit
from runner.results.repopaths import PACKAGE_PARENT, repository_root, shown, shown_runbook
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag
from tests.support.results import run_result


def test_the_root_is_the_configuration_s_folder_then_git_then_the_cwd(tmp_path: Path) -> None:
    deep = tmp_path / "repo" / "team" / "ci"
    deep.mkdir(parents=True)
    assert repository_root(deep) == deep  # neither: the current folder
    (tmp_path / "repo" / ".git").mkdir()
    assert repository_root(deep) == tmp_path / "repo"
    (tmp_path / "repo" / "team" / "gameday.toml").write_text("")
    assert repository_root(deep) == tmp_path / "repo" / "team"  # the configuration wins


def test_shown_paths(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    assert shown(root / "scenarios" / "kv.yaml", root) == "scenarios/kv.yaml"
    builtin = PACKAGE_PARENT / "runner" / "builtin_scenarios" / "tp-mismatch.yaml"
    assert shown(builtin, root) == "runner/builtin_scenarios/tp-mismatch.yaml"
    assert shown(tmp_path / "elsewhere.yaml", root) == str(tmp_path / "elsewhere.yaml")
    scenario = root / "scenarios" / "kv.yaml"
    assert shown_runbook("../runbooks/kv.md#raise", scenario, root) == "runbooks/kv.md#raise"
    assert shown_runbook("https://wiki.example/kv", scenario, root) == "https://wiki.example/kv"


def test_a_builtin_is_named_as_in_the_package_when_the_venv_is_in_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's .venv inside its repository holds gameday's package: a built-in is
    `runner/builtin_scenarios/...`, not a path into site-packages CI cannot link."""
    from runner.results import repopaths

    root = tmp_path / "repo"
    site = root / ".venv" / "lib" / "python3.11" / "site-packages"
    monkeypatch.setattr(repopaths, "PACKAGE_PARENT", site)
    builtin = site / "runner" / "builtin_scenarios" / "tp-mismatch.yaml"
    assert shown(builtin, root) == "runner/builtin_scenarios/tp-mismatch.yaml"
    assert shown(root / "gameday" / "kv.yaml", root) == "gameday/kv.yaml"


def test_a_run_names_its_scenario_and_runbook_from_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JUnit's `file=` and the runbook are what the repository calls them, wherever CI checked
    it out (here: a temporary folder, the run started in a subfolder)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "flags.md").write_text("# Roll back\n")
    doc = scenario_doc()
    doc["recover"][1]["runbook"] = "runbooks/flags.md#roll-back"
    run = fake_run(tmp_path, doc, wrong_flag())
    (tmp_path / "ci").mkdir()
    monkeypatch.chdir(tmp_path / "ci")
    result = run.run()
    assert result.file == "scenario.yaml"
    assert result.runbooks == {"recover 2: Roll back": "runbooks/flags.md#roll-back"}
    xml = ET.fromstring(junit(run_result(result)))
    assert {el.get("file") for el in xml.iter() if el.get("file")} == {"scenario.yaml"}
