"""The format of user-written steps: what is refused when the file loads, with file:line and
field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import ScenarioError
from runner.spec.scenario import load_scenario
from tests.support.fakelab import scenario_doc


def load(tmp_path: Path, doc: dict[str, Any]) -> tuple[Path, list[str]]:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, path.read_text().splitlines()


def refused(tmp_path: Path, doc: dict[str, Any]) -> ScenarioError:
    path, _ = load(tmp_path, doc)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    return exc.value


def test_a_playbook_step_without_its_playbook_names_the_field(tmp_path: Path) -> None:
    doc = scenario_doc(inject=[{"kind": "playbook", "limit": "serving"}])
    err = refused(tmp_path, doc)
    path, lines = load(tmp_path, doc)
    assert (err.field, err.line) == ("inject.0.playbook", lines.index("- kind: playbook") + 1)
    assert err.message == f"{path}:{err.line} [inject.0.playbook]: required key is missing"


def test_an_undo_on_a_recovery_step_is_refused(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["recover"][1]["actions"] = [
        {"kind": "command", "argv": ["./fix"], "undo": {"kind": "command", "argv": ["./unfix"]}}
    ]
    err = refused(tmp_path, doc)
    assert err.field == "recover.1"
    assert err.message.endswith(
        "undo: belongs on an injected step; cleanup undoes a recovery step's "
        "changes and re-applies the baseline after a user step"
    )


def test_an_undo_has_no_undo_and_paths_start_with_a_slash(tmp_path: Path) -> None:
    nested = {"kind": "command", "argv": ["a"], "undo": {"kind": "command", "argv": ["b"]}}
    err = refused(
        tmp_path, scenario_doc(inject=[{"kind": "command", "argv": ["x"], "undo": nested}])
    )
    assert (err.field, err.message.split("]: ")[1]) == (
        "inject.0.undo.undo",
        "unknown key (not part of the format; check its spelling)",
    )
    err = refused(tmp_path, scenario_doc(inject=[{"kind": "http", "path": "admin"}]))
    assert err.field == "inject.0.path"


def test_expect_output_compiles_on_re2(tmp_path: Path) -> None:
    step = {"kind": "command", "argv": ["x"], "expect_output": ["(?=lookahead)"]}
    err = refused(tmp_path, scenario_doc(inject=[step]))
    assert err.field == "inject.0.expect_output.0"


def test_a_url_runbook_needs_no_file(tmp_path: Path) -> None:
    doc = scenario_doc()
    doc["recover"][1]["runbook"] = "https://wiki.example/kv#raise"
    path, _ = load(tmp_path, doc)
    assert load_scenario(path).scenario.recover[1].runbook == "https://wiki.example/kv#raise"


def test_a_runbook_path_may_name_its_section(tmp_path: Path) -> None:
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "kv.md").write_text("# KV cache\n## Raise\n")
    doc = scenario_doc()
    doc["recover"][1]["runbook"] = "runbooks/kv.md#raise"
    path, _ = load(tmp_path, doc)
    assert load_scenario(path).scenario.recover[1].runbook == "runbooks/kv.md#raise"
    doc["recover"][1]["runbook"] = "runbooks/db.md#raise"
    err = refused(tmp_path, doc)
    assert (err.field, err.message.split("]: ")[1]) == (
        "recover.1.runbook",
        f"runbook 'runbooks/db.md#raise' does not exist (looked for {tmp_path}/runbooks/db.md)",
    )


@pytest.mark.parametrize(
    "where",
    [("per_lab", "kubernetes"), ("per_vllm", "0.33"), ("per_vllm", "0.33", "per_lab", "compose")],
)
def test_a_missing_playbook_in_a_variant_is_refused_where_it_is_named(
    tmp_path: Path, where: tuple[str, ...]
) -> None:
    """A file named only in a per_lab or per_vllm section is checked when the file loads, like
    the shared sections' files, not when a lab of that kind first runs it."""
    doc = scenario_doc(labs=["local", "compose", "kubernetes"])
    recover = [dict(step) for step in doc["recover"]]
    recover[1]["actions"] = [{"kind": "playbook", "playbook": "playbooks/k8s-fix.yaml"}]
    variant: dict[str, Any] = {"recover": recover}
    if where[0] == "per_vllm":
        variant["note"] = "0.33 prints it in other words"
    if len(where) == 4:
        variant = {"note": variant.pop("note"), "per_lab": {where[3]: {"recover": recover}}}
    doc[where[0]] = {where[1]: variant}
    err = refused(tmp_path, doc)
    assert err.field == ".".join((*where, "recover", "1", "actions", "0", "playbook"))
    path, lines = load(tmp_path, doc)
    assert lines[err.line - 1].strip() == "playbook: playbooks/k8s-fix.yaml"
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "k8s-fix.yaml").write_text("- hosts: all\n  tasks: []\n")
    assert load_scenario(path).scenario
