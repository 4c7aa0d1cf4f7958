"""runner.spec.catalogue: the built-in scenarios, the team's first, and ids as arguments."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import ScenarioError
from runner.spec.catalogue import BUILTIN, builtin_dir, resolve, scenario_set
from tests.support.cli import ROOT, SHIPPED


def copy(src: str, dest: Path, new_id: str | None = None) -> Path:
    text = (ROOT / "scenarios" / f"{src}.yaml").read_text()
    if new_id:
        text = text.replace(f"id: {src}", f"id: {new_id}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def test_the_catalogue_is_the_repositorys_scenarios() -> None:
    files = sorted(builtin_dir().glob("*.yaml"))
    assert [f.stem for f in files] == SHIPPED
    for f in files:
        assert f.read_bytes() == (ROOT / "scenarios" / f.name).read_bytes()


def test_without_team_folders_the_catalogue() -> None:
    entries = scenario_set([])
    assert [e.loaded.scenario.metadata.id for e in entries] == SHIPPED
    assert {(e.origin, e.overrides) for e in entries} == {(BUILTIN, False)}


def test_team_first_and_a_catalogue_id_overridden(tmp_path: Path) -> None:
    own = copy("tp-mismatch", tmp_path / "team" / "a.yaml", "our-tp")
    over = copy("kv-cache-shortage", tmp_path / "team" / "b.yaml")
    entries = scenario_set([tmp_path / "team"])
    assert [(e.loaded.scenario.metadata.id, e.origin, e.overrides) for e in entries] == [
        ("our-tp", str(own), False),
        ("kv-cache-shortage", str(over), True),
        *((sid, BUILTIN, False) for sid in SHIPPED if sid != "kv-cache-shortage"),
    ]


def test_without_the_catalogue_only_the_teams_but_its_ids_still_resolve(tmp_path: Path) -> None:
    own = copy("tp-mismatch", tmp_path / "team" / "a.yaml", "our-tp")
    entries = scenario_set([tmp_path / "team"], builtin=False)
    assert [(e.loaded.scenario.metadata.id, e.origin) for e in entries] == [("our-tp", str(own))]
    assert [e.loaded.scenario.metadata.id for e in resolve([], [tmp_path / "team"], False)] == [
        "our-tp"
    ]
    named = resolve(["kv-cache-shortage"], [tmp_path / "team"], False)
    assert [(e.loaded.scenario.metadata.id, e.origin) for e in named] == [
        ("kv-cache-shortage", BUILTIN)
    ]


def test_the_checkouts_own_folder_counts_as_builtin() -> None:
    entries = scenario_set([ROOT / "scenarios"])
    assert [(e.loaded.scenario.metadata.id, e.origin) for e in entries] == [
        (sid, BUILTIN) for sid in SHIPPED
    ]


def test_two_team_files_with_one_id(tmp_path: Path) -> None:
    copy("tp-mismatch", tmp_path / "team" / "a.yaml", "ours")
    second = copy("tp-mismatch", tmp_path / "team" / "b.yaml", "ours")
    with pytest.raises(ScenarioError) as exc:
        scenario_set([tmp_path / "team"])
    assert (exc.value.file, exc.value.field, exc.value.exit_code) == (
        str(second),
        "metadata.id",
        2,
    )


def test_ids_and_paths_as_arguments(tmp_path: Path) -> None:
    own = copy("tp-mismatch", tmp_path / "team" / "a.yaml", "our-tp")
    other = copy("head-only-restart", tmp_path / "elsewhere" / "c.yaml", "other")
    entries = resolve(["kv-cache-shortage", str(other), "our-tp"], [tmp_path / "team"])
    assert [(e.loaded.scenario.metadata.id, e.origin) for e in entries] == [
        ("kv-cache-shortage", BUILTIN),
        ("other", str(other)),
        ("our-tp", str(own)),
    ]


def test_unknown_id_did_you_mean() -> None:
    with pytest.raises(ScenarioError) as exc:
        resolve(["kv-cache-shortge"], [])
    assert str(exc.value) == (
        "'kv-cache-shortge' is neither a scenario file nor a scenario id\n"
        "  hint: did you mean 'kv-cache-shortage'?"
    )
