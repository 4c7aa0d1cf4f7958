"""validate's checks beyond the format: engine flags and variables the engine knows, node names
the inventory has (with "did you mean"), unique ids, and the settable positional model."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.errors import ScenarioError
from runner.labs.common.planning import edit_args
from runner.spec.checks import check_engine_names, check_unique_ids
from runner.spec.inventory_load import check_scenario, load_inventory
from runner.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]
LOCAL = load_inventory(ROOT / "inventories" / "local.yaml")


def variant(tmp_path: Path, src: str, old: str, new: str, name: str = "s.yaml") -> Path:
    text = (ROOT / "scenarios" / src).read_text()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new))
    return p


@pytest.mark.parametrize(
    ("src", "old", "new", "message", "line", "field", "hint"),
    [
        (
            "kv-cache-shortage.yaml", "--max-model-len: 16384", "--max-modle-len: 16384",
            "'--max-modle-len' is not a flag of vllm serve", 23, "inject.0.args.--max-modle-len",
            "did you mean '--max-model-len'?",
        ),
        (
            "kv-cache-shortage.yaml", "--gpu-memory-utilization:", "--gpu-memory-utilisation:",
            "'--gpu-memory-utilisation' is not a flag of vllm serve", 22,
            "inject.0.args.--gpu-memory-utilisation", "did you mean '--gpu-memory-utilization'?",
        ),
        (
            "kv-cache-shortage.yaml", "--max-model-len: 16384", "--frobnicate: 1",
            "'--frobnicate' is not a flag of vllm serve", 23, "inject.0.args.--frobnicate",
            "see `vllm-lab serve --help` for its flags",
        ),
        (
            "stray-gpu-process.yaml", "VLLM_USE_DEEP_GEMM", "VLLM_USE_DEEP_GEM",
            "'VLLM_USE_DEEP_GEM' is not a vLLM variable", 81,
            "recover.0.actions.0.env.VLLM_USE_DEEP_GEM", "did you mean 'VLLM_USE_DEEP_GEMM'?",
        ),
    ],
)  # fmt: skip
def test_a_name_the_engine_does_not_know_is_refused_with_a_suggestion(
    tmp_path: Path, src: str, old: str, new: str, message: str, line: int, field: str, hint: str
) -> None:
    ls = load_scenario(variant(tmp_path, src, old, new))
    with pytest.raises(ScenarioError) as err:
        check_engine_names(ls)
    e = err.value
    assert (e.message, e.line, e.field, e.hint) == (
        f"{e.file}:{line} [{field}]: {message}",
        line,
        field,
        hint,
    )


def test_every_shipped_scenario_names_only_what_the_engine_knows() -> None:
    for p in sorted((ROOT / "scenarios").glob("*.yaml")):
        check_engine_names(load_scenario(p), LOCAL)  # raises on a name it does not know


def test_an_unknown_vllm_variable_that_is_no_typo_is_allowed(tmp_path: Path) -> None:
    # vLLM only warns about an unknown VLLM_* name; a scenario may set one to show the warning
    ls = load_scenario(
        variant(tmp_path, "stray-gpu-process.yaml", "VLLM_USE_DEEP_GEMM", "VLLM_SERVICE_HOST")
    )
    check_engine_names(ls)


def test_model_flag_under_a_positional_model_is_refused(tmp_path: Path) -> None:
    path = variant(tmp_path, "kv-cache-shortage.yaml", "--max-model-len: 16384", "--model: m")
    ls = load_scenario(path)
    check_engine_names(ls)  # without an inventory nothing says where the model is named
    with pytest.raises(ScenarioError) as err:
        check_engine_names(ls, LOCAL)
    assert (err.value.message, err.value.hint) == (
        f"{path}:23 [inject.0.args.--model]: --model does nothing on serving: its command line "
        "names the model as `vllm serve MODEL`, which wins",
        "set `model_tag` (the positional model) instead",
    )


def test_the_positional_model_is_settable() -> None:
    args = ["Qwen/Qwen2.5-14B-Instruct-AWQ", "--max-model-len", "4096"]
    assert edit_args(args, {"model_tag": "Qwen/Qwen2.5-14B-Instruct-AWK"}) == [
        "Qwen/Qwen2.5-14B-Instruct-AWK",
        "--max-model-len",
        "4096",
    ]
    assert edit_args(args, {"model_tag": None}) == ["--max-model-len", "4096"]
    assert edit_args(["--max-model-len", "4096"], {"model_tag": "m"}) == [
        "m",
        "--max-model-len",
        "4096",
    ]


def test_a_target_typo_gets_a_suggestion(tmp_path: Path) -> None:
    ls = load_scenario(
        variant(tmp_path, "kv-cache-shortage.yaml", "target: serving", "target: servng")
    )
    with pytest.raises(ScenarioError) as err:
        check_scenario(ls, LOCAL)
    assert (err.value.line, err.value.field, err.value.hint) == (
        13,
        "target",
        "did you mean 'serving'? name one of its hosts: node1, node2, node3, node4, serving",
    )


def test_two_files_with_one_id_are_refused(tmp_path: Path) -> None:
    a = load_scenario(
        variant(tmp_path, "tp-mismatch.yaml", "exit_code: 1", "exit_code: 1", "a.yaml")
    )
    b = load_scenario(
        variant(tmp_path, "tp-mismatch.yaml", "exit_code: 1", "exit_code: 1", "b.yaml")
    )
    check_unique_ids([a])
    with pytest.raises(ScenarioError) as err:
        check_unique_ids([a, b])
    assert (err.value.message, err.value.file, err.value.field) == (
        f"{b.path}:4 [metadata.id]: scenario id 'tp-mismatch' is also the id of {a.path}",
        str(b.path),
        "metadata.id",
    )
