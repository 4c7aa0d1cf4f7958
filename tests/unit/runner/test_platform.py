"""Which platform a lab's vLLM runs on: the inventory's gameday_lab.platform, and the scenarios'
per_platform sections resolved for it (the most specific variant)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.errors import ScenarioError
from runner.labs.fake import FakeLab
from runner.run.plan import plan_scenario, render
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind
from runner.spec.scenario import load_scenario, variant_notes
from tests.support.cli import ROOT
from tests.support.fakelab import inventory
from vllmfacts.wording import Era, Platform

GOOD = ROOT / "scenarios" / "context-window-overflow.yaml"
REAL = ROOT / "inventories" / "local-realvllm.yaml"
ENTRY = """\
per_vllm:
  "0.33":
    note: 0.33 words
    target: from-per-vllm
    hints: [{text: per-vllm hint}]
per_platform:
  cpu:
    note: "  the CPU worker\\n  prints its own (vllm/v1/worker/cpu_worker.py)  "
    hints: [{text: cpu hint}]
"""


def scenario(tmp_path: Path, extra: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(GOOD.read_text() + textwrap.dedent(extra))
    return p


def test_the_default_platform_is_gpu_and_the_real_vllm_inventory_says_cpu() -> None:
    assert load_inventory(ROOT / "inventories" / "local.yaml").lab.platform is Platform.GPU
    real = load_inventory(REAL)
    assert real.lab.platform is Platform.CPU
    assert real.lab.engine_setup == "make realvllm-env"
    # a relative engine program is the inventory folder's, wherever gameday runs from
    assert real.lab.engine_command == (str(ROOT / ".venv-vllm" / "bin" / "vllm"), "serve")


def test_per_platform_is_the_most_specific_variant(tmp_path: Path) -> None:
    sc = load_scenario(scenario(tmp_path, ENTRY)).scenario
    cpu = sc.for_lab(LabKind.LOCAL, Era.V0_33, Platform.CPU)
    assert [h.text for h in cpu.hints] == ["cpu hint"]  # over per_vllm's
    assert cpu.target == "from-per-vllm"  # what per_platform leaves alone stays per_vllm's
    gpu = sc.for_lab(LabKind.LOCAL, Era.V0_33)
    assert [h.text for h in gpu.hints] == ["per-vllm hint"]
    assert sc.for_lab(LabKind.LOCAL, Era.V0_19) is sc
    assert variant_notes(sc, LabKind.LOCAL, Era.V0_33, Platform.CPU) == [
        "vLLM on CPU: runs its own hints (per_platform.cpu)",
        "vLLM 0.33 lab: runs its own target (per_vllm.0.33)",
        "per_vllm.0.33 note: 0.33 words",
        "per_platform.cpu note: the CPU worker prints its own (vllm/v1/worker/cpu_worker.py)",
    ]


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("per_platform:\n  tpu: {note: n, target: x}\n", "per_platform.tpu", "'gpu' or 'cpu'"),
        ("per_platform:\n  cpu: {target: x}\n", "per_platform.cpu.note", "required"),
        ("per_platform:\n  cpu: {note: n}\n", "per_platform.cpu", "replaces at least one"),
    ],
)
def test_a_bad_entry_is_one_message_at_its_field(
    tmp_path: Path, extra: str, field: str, message: str
) -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario(tmp_path, extra))
    assert e.value.field == field
    assert message in str(e.value)
    assert e.value.line is not None


def test_the_plan_on_a_cpu_lab_shows_the_sections_and_the_note(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    inv = inv.model_copy(update={"lab": inv.lab.model_copy(update={"platform": Platform.CPU})})
    lab = FakeLab(inv, state_dir=tmp_path / "state")
    kv = load_scenario(ROOT / "scenarios" / "kv-cache-shortage.yaml")
    text = "\n".join(render(plan_scenario(kv, lab)))
    assert "vLLM on CPU: runs its own expect, hints, inject, recover (per_platform.cpu)" in text
    assert "per_platform.cpu note: On vLLM's CPU platform" in text
    assert "Explicitly set" in text and "Available KV cache memory: (?P" not in text


def test_validate_checks_the_flags_and_files_a_per_platform_section_names(tmp_path: Path) -> None:
    from runner.spec.checks import check_engine_names

    bad_flag = "per_platform:\n  cpu:\n    note: n\n    inject:\n      - kind: set_args\n"
    bad_flag += "        node: serving\n        args: {--max-model-lenn: 4096}\n"
    p = scenario(tmp_path, bad_flag)
    with pytest.raises(ScenarioError) as e:
        check_engine_names(load_scenario(p))
    assert e.value.field == "per_platform.cpu.inject.0.args.--max-model-lenn"
    assert "did you mean '--max-model-len'?" in str(e.value)
    missing = "per_platform:\n  cpu:\n    note: n\n    inject:\n      - kind: playbook\n"
    missing += "        playbook: playbooks/nowhere.yaml\n"
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario(tmp_path, missing))
    assert "does not exist" in str(e.value)
    assert e.value.field is not None and e.value.field.startswith("per_platform.cpu.inject.0")


def test_a_cpu_lab_must_say_the_033_era(tmp_path: Path) -> None:
    from runner.errors import InventoryError

    p = tmp_path / "inv.yaml"
    p.write_text(REAL.read_text().replace('vllm_version: "0.33"', 'vllm_version: "0.19"'))
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    assert e.value.field == "all.vars.gameday_lab"
    assert 'set vllm_version: "0.33" with it' in str(e.value)
