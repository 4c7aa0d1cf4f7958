"""Which vLLM a lab runs: the inventory's gameday_lab.vllm_version, handed to the lab engines
as GAMEDAY_VLLM_ERA, and the scenarios' per_vllm sections resolved for it."""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import InventoryError, ScenarioError
from runner.labs.compose.project import compose_env
from runner.labs.kubernetes.lab_objects import all_manifests
from runner.labs.kubernetes.manifests import CONTAINER
from runner.labs.local.driver import LocalLab
from runner.results.schema import Verdict
from runner.run.plan import plan_scenario, render
from runner.spec.inventory import ERA_ENV, Inventory
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind, Outcome
from runner.spec.scenario import load_scenario, variant_notes
from tests.support.cli import ROOT
from tests.support.fakelab import fake_run, scenario_doc, wrong_flag
from vllmfacts.wording import Era

LOCAL = ROOT / "inventories" / "local.yaml"
LOCAL_033 = ROOT / "inventories" / "local-vllm033.yaml"
KV = ROOT / "scenarios" / "kv-cache-shortage.yaml"


def edited(tmp_path: Path, src: Path, old: str, new: str, name: str = "inv.yaml") -> Path:
    text = src.read_text()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1))
    return p


def line_of(path: Path, n: int | None) -> str:
    assert n is not None
    return path.read_text().splitlines()[n - 1].strip()


# ---- the inventory field -----------------------------------------------------------------------


def test_the_default_is_019_and_the_shipped_033_inventory_says_033() -> None:
    assert load_inventory(LOCAL).lab.vllm_version is Era.V0_19
    inv = load_inventory(LOCAL_033)
    assert inv.lab.vllm_version is Era.V0_33
    # otherwise the same lab: the same nodes, args and environments
    base = load_inventory(LOCAL)
    assert [(n.name, n.args, n.env) for n in inv.nodes] == [
        (n.name, n.args, n.env) for n in base.nodes
    ]


def test_an_unquoted_version_is_read_as_its_text(tmp_path: Path) -> None:
    p = edited(
        tmp_path, LOCAL, "      kind: local\n", "      kind: local\n      vllm_version: 0.33\n"
    )
    assert load_inventory(p).lab.vllm_version is Era.V0_33


def test_an_unknown_version_is_refused_at_its_line(tmp_path: Path) -> None:
    p = edited(
        tmp_path, LOCAL, "      kind: local\n", '      kind: local\n      vllm_version: "0.34"\n'
    )
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    assert e.value.field == "all.vars.gameday_lab.vllm_version"
    assert line_of(p, e.value.line) == 'vllm_version: "0.34"'
    assert "'0.19' or '0.33'" in str(e.value)


@pytest.mark.parametrize(
    ("old", "field"),
    [
        # a host's own variables
        (
            "            HF_HOME: /root/.cache/huggingface\n",
            "all.children.serving.hosts.serving.gameday_engine_env.GAMEDAY_VLLM_ERA",
        ),
        # a group's variables
        (
            "          VLLM_WORKER_MULTIPROC_METHOD: spawn\n      children:\n",
            "all.children.tp_group.vars.gameday_engine_env.GAMEDAY_VLLM_ERA",
        ),
    ],
)
def test_a_node_env_naming_the_era_is_refused_where_it_is(
    tmp_path: Path, old: str, field: str
) -> None:
    indent = old[: len(old) - len(old.lstrip())]
    p = edited(tmp_path, LOCAL, old, f'{indent}{ERA_ENV}: "0.33"\n' + old)
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    assert e.value.field == field
    assert line_of(p, e.value.line) == f'{ERA_ENV}: "0.33"'
    assert "set by gameday from the lab's vllm_version" in str(e.value)
    assert 'gameday_lab.vllm_version: "0.33"' in (e.value.hint or "")


def with_version(inv: Inventory, era: Era) -> Inventory:
    return inv.model_copy(update={"lab": inv.lab.model_copy(update={"vllm_version": era})})


@pytest.mark.parametrize("era", list(Era))
def test_the_local_lab_hands_the_version_to_every_engine(era: Era) -> None:
    lab = LocalLab(with_version(load_inventory(LOCAL), era))
    for n in lab.inventory.nodes:
        spec = lab._node_spec(n, {})
        # the node's own env is laid over base_env: it cannot name the era (refused above)
        assert spec["base_env"][ERA_ENV] == era.value and ERA_ENV not in spec["env"]


@pytest.mark.parametrize("era", list(Era))
def test_the_compose_lab_hands_the_version_to_its_compose_file(era: Era, tmp_path: Path) -> None:
    inv = with_version(load_inventory(ROOT / "inventories" / "compose.yaml"), era)
    assert inv.lab.compose is not None
    assert compose_env(inv, inv.lab.compose, tmp_path)[ERA_ENV] == era.value
    engine_env = yaml.safe_load((ROOT / "compose" / "compose.yaml").read_text())["x-engine-env"]
    assert engine_env[ERA_ENV] == "${GAMEDAY_VLLM_ERA:-0.19}"


def pod_envs(inv: Inventory) -> list[dict[str, str]]:
    out = []
    for doc in all_manifests(inv):
        spec = doc.get("spec", {}).get("template", {}).get("spec")
        if spec:
            out += [
                {e["name"]: e["value"] for e in c.get("env", [])}
                for c in spec["containers"]
                if c["name"] == CONTAINER
            ]
    return out


def test_kubernetes_manifests_carry_the_version_when_it_is_not_the_default() -> None:
    inv = load_inventory(ROOT / "inventories" / "eks.yaml")
    envs = pod_envs(inv)
    # the EKS start-failure write-up's manifests, unchanged
    assert envs and all(ERA_ENV not in e for e in envs)
    envs = pod_envs(with_version(inv, Era.V0_33))
    assert envs and all(e[ERA_ENV] == "0.33" for e in envs)


# ---- the scenario model ------------------------------------------------------------------------

ENTRY = """\
per_vllm:
  "0.33":
    note: vLLM 0.33 prints it otherwise (vllm/x.py, f)
    recover:
      - name: Put the length back through the API
        outcome: restores
        actions:
          - kind: set_args
            node: serving
            args: {--max-model-len: 4096}
"""
GOOD = ROOT / "scenarios" / "context-window-overflow.yaml"


def scenario(tmp_path: Path, extra: str, base: str | None = None) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text((base or GOOD.read_text()) + textwrap.dedent(extra))
    return p


@pytest.mark.parametrize(
    ("extra", "field", "line", "message"),
    [
        (ENTRY.replace('"0.33"', '"0.34"'), "per_vllm.0.34", '"0.34":', "'0.19' or '0.33'"),
        (
            ENTRY.replace("    note: vLLM 0.33 prints it otherwise (vllm/x.py, f)\n", ""),
            "per_vllm.0.33.note",
            '"0.33":',
            "required key is missing",
        ),
        (
            ENTRY.replace("    recover:", "    nte: x\n    recover:"),
            "per_vllm.0.33.nte",
            "nte: x",
            "unknown key",
        ),
        (
            'per_vllm:\n  "0.33": {note: "words"}\n',
            "per_vllm.0.33",
            '"0.33": {note: "words"}',
            "a per_vllm entry replaces at least one section",
        ),
        (
            ENTRY.replace("outcome: restores", "outcome: does_not_restore"),
            "per_vllm.0.33",
            '"0.33":',
            "recover needs at least one step with outcome: restores",
        ),
    ],
)
def test_a_bad_entry_is_one_message_at_its_line(
    tmp_path: Path, extra: str, field: str, line: str, message: str
) -> None:
    p = scenario(tmp_path, extra)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field == field
    assert line_of(p, e.value.line) == line
    assert message in str(e.value)


def test_a_nested_per_lab_for_a_lab_not_in_labs_is_refused(tmp_path: Path) -> None:
    base = GOOD.read_text().replace("labs: [local, compose, kubernetes]", "labs: [local]")
    extra = 'per_vllm:\n  "0.33":\n    note: n\n    per_lab:\n      kubernetes: {target: serving}\n'
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario(tmp_path, extra, base))
    assert "per_vllm.0.33.per_lab names kubernetes, which is not in labs (local)" in str(e.value)


def test_a_nested_node_is_checked_against_the_inventory(tmp_path: Path) -> None:
    from runner.spec.inventory_load import check_scenario

    p = scenario(tmp_path, ENTRY.replace("node: serving", "node: servng"))
    with pytest.raises(ScenarioError) as e:
        check_scenario(load_scenario(p), load_inventory(LOCAL))
    assert e.value.field == "per_vllm.0.33.recover.0.actions.0.node"
    assert line_of(p, e.value.line) == "node: servng"


# ---- resolution and precedence -----------------------------------------------------------------

BOTH = """\
per_lab:
  kubernetes:
    target: from-per-lab
    verify:
      probes: [{kind: http, path: /per-lab}]
      time_to_recover: {max_s: 60}
per_vllm:
  "0.33":
    note: "  vLLM 0.33\\n  says so  "
    target: from-per-vllm
    hints: [{text: per-vllm hint}]
    per_lab:
      kubernetes:
        hints: [{text: most specific}]
"""


def test_per_vllm_applies_on_its_version_only(tmp_path: Path) -> None:
    sc = load_scenario(scenario(tmp_path, ENTRY)).scenario
    assert sc.for_lab(LabKind.LOCAL) is sc and sc.for_lab(LabKind.LOCAL, Era.V0_19) is sc
    new = sc.for_lab(LabKind.LOCAL, Era.V0_33)
    assert [s.name for s in new.recover] == ["Put the length back through the API"]
    assert [s.outcome for s in new.recover] == [Outcome.RESTORES]
    assert new.expect == sc.expect and new.inject == sc.inject  # the rest is shared
    assert sc.replaced_on(LabKind.COMPOSE, Era.V0_33) == ["recover"]
    assert sc.replaced_on(LabKind.COMPOSE) == []


def test_the_more_specific_variant_wins_a_section(tmp_path: Path) -> None:
    sc = load_scenario(scenario(tmp_path, BOTH)).scenario
    k8s_033 = sc.for_lab(LabKind.KUBERNETES, Era.V0_33)
    # per_vllm over per_lab; the version's own per_lab over both; per_lab where only it replaces
    assert k8s_033.target == "from-per-vllm"
    assert [h.text for h in k8s_033.hints] == ["most specific"]
    assert k8s_033.verify.probes[0].path == "/per-lab"  # type: ignore[union-attr]
    assert sc.resolved(LabKind.KUBERNETES, Era.V0_33).origins == {
        "hints": "per_vllm.0.33.per_lab.kubernetes",
        "target": "per_vllm.0.33",
        "verify": "per_lab.kubernetes",
    }
    local_033 = sc.for_lab(LabKind.LOCAL, Era.V0_33)
    assert local_033.target == "from-per-vllm" and [h.text for h in local_033.hints] == [
        "per-vllm hint"
    ]
    assert sc.for_lab(LabKind.KUBERNETES).target == "from-per-lab"
    assert variant_notes(sc, LabKind.KUBERNETES, Era.V0_33) == [
        "kubernetes lab on vLLM 0.33: runs its own hints (per_vllm.0.33.per_lab.kubernetes)",
        "vLLM 0.33 lab: runs its own target (per_vllm.0.33)",
        "kubernetes lab: runs its own verify (per_lab.kubernetes)",
        "per_vllm.0.33 note: vLLM 0.33 says so",
    ]
    assert variant_notes(sc, LabKind.KUBERNETES, Era.V0_19) == [
        "kubernetes lab: runs its own target, verify (per_lab.kubernetes)"
    ]


def test_the_shipped_scenarios_differ_on_033_only_where_they_say() -> None:
    by_id = {
        ls.scenario.metadata.id: ls.scenario
        for ls in (load_scenario(p) for p in sorted((ROOT / "scenarios").glob("*.yaml")))
    }
    changed = {k: [e for e in v.per_vllm if isinstance(e, Era)] for k, v in by_id.items()}
    assert {k: v for k, v in changed.items() if v} == {
        "cuda-graph-capture-oom": [Era.V0_33],
        "kv-cache-shortage": [Era.V0_33],
        "service-name-collision": [Era.V0_33],
        "stray-gpu-process": [Era.V0_33],
    }
    # the entries for releases no lab runs: their wordings, for triage alone
    assert {k: list(v.wordings()) for k, v in by_id.items() if v.wordings()} == {
        "cuda-graph-capture-oom": ["0.2.7-0.10.2", "0.8.5-0.11.0"],
        "engine-core-death": ["0.5.5-0.8.4"],
        "kv-cache-shortage": ["0.2.7-0.10.2", "0.7.0-0.8.2", "0.8.3-0.9.0"],
        "pd-kv-handshake": ["0.9.2-0.12.0"],
        "service-name-collision": ["0.6.0-0.8.5", "0.7.3-0.8.5", "0.9.0"],
    }
    for sc in by_id.values():
        for kind in sc.labs:  # the 0.19 lab runs every scenario's shared sections
            assert sc.for_lab(kind, Era.V0_19) == sc.for_lab(kind)
    kv = by_id["kv-cache-shortage"].for_lab(LabKind.LOCAL, Era.V0_33).expect
    assert kv.signature is not None and kv.phase is not None
    assert any("No available memory" in p.regex for p in kv.signature.in_order)
    assert kv.phase.value == "kv_cache_check"
    port = by_id["service-name-collision"].for_lab(LabKind.COMPOSE, Era.V0_33).expect
    assert port.phase is not None and port.phase.value == "cuda_graphs"
    assert port.signature is not None and not port.signature.absent
    stray = by_id["stray-gpu-process"]
    assert stray.replaced_on(LabKind.KUBERNETES, Era.V0_33) == ["expect", "inject"]
    k8s = stray.for_lab(LabKind.KUBERNETES, Era.V0_33).expect
    assert k8s.state is not None and k8s.state.min_restarts == 1  # the kubelet's restart kept
    for sc in by_id.values():
        for entry in sc.per_vllm.values():
            assert "vllm/" in entry.note  # each names the source it is read from


# ---- where a scenario meets a lab --------------------------------------------------------------


def doc_033() -> dict[str, Any]:
    """The fake start-up failure, whose shared signature wants a line only the 0.19 engine
    prints, and whose per_vllm."0.33" wants the line the fake engine prints."""
    doc = scenario_doc()
    shared = copy.deepcopy(doc["expect"])
    shared["signature"]["in_order"][0] = {"regex": "Loading weights took .* seconds \\(0\\.19\\)"}
    doc["per_vllm"] = {
        "0.33": {"note": "vLLM 0.33 prints it plain (vllm/x.py, f)", "expect": doc["expect"]}
    }
    doc["expect"] = shared
    return doc


@pytest.mark.parametrize(
    ("era", "verdict"), [(Era.V0_33, Verdict.PASSED), (Era.V0_19, Verdict.FAILED)]
)
def test_a_run_takes_the_sections_of_its_labs_version(
    tmp_path: Path, era: Era, verdict: Verdict
) -> None:
    run = fake_run(tmp_path, doc_033(), wrong_flag())
    run.lab.inventory = with_version(run.lab.inventory, era)
    result = run.run()
    assert result.verdict is verdict
    notes = [n for n in result.notes if "per_vllm" in n]
    if era is Era.V0_33:
        assert notes == [
            "vLLM 0.33 lab: runs its own expect (per_vllm.0.33)",
            "per_vllm.0.33 note: vLLM 0.33 prints it plain (vllm/x.py, f)",
        ]
    else:
        assert notes == []


def test_the_plan_shows_the_sections_and_the_note(tmp_path: Path) -> None:
    from runner.labs.fake import FakeLab
    from tests.support.fakelab import inventory

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(doc_033(), sort_keys=False))
    lab = FakeLab(with_version(inventory(tmp_path), Era.V0_33), state_dir=tmp_path / "state")
    text = "\n".join(render(plan_scenario(load_scenario(p), lab)))
    assert "  vLLM 0.33 lab: runs its own expect (per_vllm.0.33)" in text
    assert "per_vllm.0.33 note: vLLM 0.33 prints it plain" in text
    assert "Loading weights took .* seconds \\(0\\.19\\)" not in text


EKS_IMAGE = "        image: vllm/vllm-openai:v0.19.1\n"
SAYS_033 = ("      kind: kubernetes\n", '      kind: kubernetes\n      vllm_version: "0.33"\n')


def test_a_vllm_image_of_another_release_is_refused(tmp_path: Path) -> None:
    eks = ROOT / "inventories" / "eks.yaml"
    cases = [
        # the EKS start-failure write-up's v0.19.1 image, given, on a lab that says 0.33
        (edited(tmp_path, eks, *SAYS_033, name="a.yaml"), "kubernetes.image", EKS_IMAGE.strip()),
        # vLLM's 0.33.0 image on a lab that says nothing (0.19)
        (
            edited(tmp_path, eks, EKS_IMAGE, EKS_IMAGE.replace("0.19.1", "0.33.0"), "b.yaml"),
            "kubernetes.image",
            "image: vllm/vllm-openai:v0.33.0",
        ),
        # the default image (v0.19.1) on a lab that says 0.33: the version is where it is said
        (
            edited(
                tmp_path, edited(tmp_path, eks, EKS_IMAGE, "", "c.yaml"), *SAYS_033, name="d.yaml"
            ),
            "vllm_version",
            'vllm_version: "0.33"',
        ),
    ]
    for p, field, line in cases:
        with pytest.raises(InventoryError) as e:
            load_inventory(p)
        assert e.value.field == f"all.vars.gameday_lab.{field}"
        assert line_of(p, e.value.line) == line
        assert "vllm/vllm-openai:v" in (e.value.hint or "")
    both = edited(tmp_path, cases[1][0], *SAYS_033, name="both.yaml")
    assert load_inventory(both).lab.vllm_version is Era.V0_33


def test_validate_checks_the_flags_a_per_vllm_section_sets(tmp_path: Path) -> None:
    from runner.spec.checks import check_engine_names

    p = scenario(tmp_path, ENTRY.replace("{--max-model-len: 4096}", "{--max-model-lenn: 4096}"))
    with pytest.raises(ScenarioError) as e:
        check_engine_names(load_scenario(p))
    assert e.value.field == "per_vllm.0.33.recover.0.actions.0.args.--max-model-lenn"
    assert line_of(p, e.value.line) == "args: {--max-model-lenn: 4096}"
    assert "did you mean '--max-model-len'?" in str(e.value)


def test_an_image_of_a_release_gameday_does_not_know_says_which_it_knows(tmp_path: Path) -> None:
    eks = ROOT / "inventories" / "eks.yaml"
    p = edited(tmp_path, eks, EKS_IMAGE, EKS_IMAGE.replace("0.19.1", "0.20.0"), "u.yaml")
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    hint = e.value.hint or ""
    assert "vllm/vllm-openai:v0.19.1" in hint and "gameday knows vLLM 0.19 and 0.33" in hint
    assert 'vllm_version to "0.20"' not in hint
