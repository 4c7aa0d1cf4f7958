"""per_lab: one scenario file, sections that differ on one kind of lab."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.errors import ScenarioError
from runner.spec.inventory_load import check_scenario, load_inventory
from runner.spec.kinds import LabKind, Outcome
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
GOOD = ROOT / "scenarios" / "context-window-overflow.yaml"

VARIANT = """\
per_lab:
  kubernetes:
    recover:
      - name: Put the length back through the API
        outcome: restores
        actions:
          - kind: set_args
            node: serving
            args: {--max-model-len: 4096}
"""


def write(tmp_path: Path, extra: str, base: str | None = None) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text((base or GOOD.read_text()) + textwrap.dedent(extra))
    return p


def test_a_variant_replaces_its_sections_whole_on_its_lab_only(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, VARIANT)).scenario
    k8s = sc.for_lab(LabKind.KUBERNETES)
    assert [s.name for s in k8s.recover] == ["Put the length back through the API"]
    assert [s.outcome for s in k8s.recover] == [Outcome.RESTORES]
    # the other sections are the shared ones, the other labs run the shared file
    assert k8s.expect == sc.expect and k8s.inject == sc.inject and k8s.verify == sc.verify
    assert sc.for_lab(LabKind.LOCAL) is sc
    assert len(sc.for_lab(LabKind.COMPOSE).recover) == len(sc.recover) == 2
    assert sc.replaced_on(LabKind.KUBERNETES) == ["recover"]
    assert sc.replaced_on(LabKind.COMPOSE) == []


def test_a_variant_for_a_lab_not_in_labs_is_refused(tmp_path: Path) -> None:
    base = GOOD.read_text().replace("labs: [local, compose, kubernetes]", "labs: [local]")
    with pytest.raises(ScenarioError) as e:
        load_scenario(write(tmp_path, VARIANT, base))
    assert "per_lab names kubernetes, which is not in labs (local)" in str(e.value)


def test_a_variant_recover_needs_a_restoring_step_at_its_line(tmp_path: Path) -> None:
    p = write(tmp_path, VARIANT.replace("outcome: restores", "outcome: does_not_restore"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "per_lab.kubernetes"
    assert "recover needs at least one step with outcome: restores" in str(e.value)
    assert p.read_text().splitlines()[e.value.line - 1].strip() == "kubernetes:"  # type: ignore[operator]


def test_an_unknown_section_or_an_empty_variant_is_one_clear_message(tmp_path: Path) -> None:
    p = write(tmp_path, "per_lab:\n  kubernetes:\n    recovr: []\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "per_lab.kubernetes.recovr" and "unknown key" in str(e.value)
    p = write(tmp_path, "per_lab:\n  kubernetes: {}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "a per_lab entry replaces at least one section" in str(e.value)
    p = write(tmp_path, "per_lab:\n  openshift: {recover: []}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == "per_lab.openshift"


def test_nodes_a_variant_names_are_checked_against_the_inventory(tmp_path: Path) -> None:
    p = write(tmp_path, VARIANT.replace("node: serving", "node: servng"))
    ls = load_scenario(p)
    with pytest.raises(ScenarioError) as e:
        check_scenario(ls, load_inventory(ROOT / "inventories" / "local.yaml"))
    assert e.value.field == "per_lab.kubernetes.recover.0.actions.0.node"
    assert p.read_text().splitlines()[e.value.line - 1].strip() == "node: servng"  # type: ignore[operator]
    assert "did you mean 'serving'?" in str(e.value)


def test_the_shipped_runtime_scenarios_differ_on_kubernetes_only_where_they_say() -> None:
    head = load_scenario(ROOT / "scenarios" / "head-only-restart.yaml").scenario
    assert LabKind.KUBERNETES in head.labs
    # detect (with delivery) is shared: the Kubernetes lab has its own Alertmanager
    assert head.replaced_on(LabKind.KUBERNETES) == ["expect", "hints", "recover"]
    k8s = head.for_lab(LabKind.KUBERNETES)
    assert [s.outcome for s in k8s.recover] == [Outcome.DOES_NOT_RESTORE, Outcome.RESTORES]
    assert k8s.expect.state is not None and k8s.expect.state.min_restarts == 1
    assert head.expect.state is not None and head.expect.state.max_restarts == 0
    stray = load_scenario(ROOT / "scenarios" / "stray-gpu-process.yaml").scenario
    assert stray.replaced_on(LabKind.KUBERNETES) == ["expect"]
    k8s_stray = stray.for_lab(LabKind.KUBERNETES).expect
    assert k8s_stray.state is not None and k8s_stray.state.min_restarts == 1
    assert k8s_stray.signature == stray.expect.signature
