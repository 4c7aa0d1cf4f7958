"""bench/differential.py: the normalised failure lines, the METADATA filter and the comparison."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from differential import Row, compare, failure_lines, normalise, scenario_case  # noqa: E402
from refvenv import cpu_requirements  # noqa: E402


def test_normalise_strips_process_prefix_timestamp_pid_and_model_folder() -> None:
    line = (
        "(EngineCore_DP0 pid=4242) ERROR 12-01 05:10:11 [core.py:1010] "
        "EngineCore failed to start. pid=4242 model=/tmp/x/models/Qwen/Q"
    )
    assert normalise(line, "/tmp/x/models") == (
        "ERROR <ts> [core.py:1010] EngineCore failed to start. pid <pid> model=Qwen/Q"
    )
    assert normalise("(APIServer pid=7) INFO 01-02 03:04:05.123 [a.py:1] hi") == (
        "INFO <ts> [a.py:1] hi"
    )


def test_normalise_keeps_the_rest_of_the_line() -> None:
    line = "  Value error, User-specified max_model_len (131072) is greater [type=value_error]"
    assert normalise(line) == (
        "Value error, User-specified max_model_len (131072) is greater [type=value_error]"
    )


def test_normalise_hides_pydantics_cut_repr_of_the_constructor_arguments() -> None:
    line = (
        "Value error, too long. [type=value_error, input_value=ArgsKwargs((), {'model': "
        "...nderer_num_workers': 1}), input_type=ArgsKwargs]"
    )
    assert normalise(line) == (
        "Value error, too long. [type=value_error, input_value=ArgsKwargs(<args>), "
        "input_type=ArgsKwargs]"
    )


def test_failure_lines_take_each_patterns_first_match_or_empty() -> None:
    out = "\n".join(
        [
            "(APIServer pid=1) INFO 12-01 00:00:00 [x.py:1] start",
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
            "(APIServer pid=1) ERROR 12-01 00:00:01 [x.py:2] World size (2) is larger",
            "World size (3) is larger",
        ]
    )
    got = failure_lines(out, ("validation error for ModelConfig", r"World size \(\d\)", "absent"))
    assert got == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "ERROR <ts> [x.py:2] World size (2) is larger",
        "",
    ]


def test_compare_pairs_lines_and_an_empty_real_line_is_never_equal() -> None:
    rows = compare("c", ("a", "b", "d"), ["x", "y", ""], ["x", "z", ""])
    assert rows == [Row("c", "a", "x", "x"), Row("c", "b", "y", "z"), Row("c", "d", "", "")]
    assert [r.equal for r in rows] == [True, False, False]


def test_cpu_requirements_drop_gpu_only_torch_family_extras_and_false_markers() -> None:
    metadata = "\n".join(
        [
            "Name: vllm",
            "Requires-Dist: regex",
            "Requires-Dist: transformers<5.21.0,>=5.16.1",
            "Requires-Dist: torch==2.14.0",
            "Requires-Dist: torchvision==0.29.0",
            "Requires-Dist: flashinfer-python==0.7.2.post1",
            "Requires-Dist: nvidia-cutlass-dsl[cu13]==4.8.0",
            "Requires-Dist: humming_kernels[cu13]==0.1.19",
            'Requires-Dist: protobuf==7.36.1; platform_machine == "s390x"',
            'Requires-Dist: xgrammar==0.2.8; python_version >= "3.0"',
            'Requires-Dist: pandas; extra == "bench"',
        ]
    )
    assert cpu_requirements(metadata) == [
        "regex",
        "transformers<5.21.0,>=5.16.1",
        "xgrammar==0.2.8",
    ]


def test_scenario_case_applies_the_inject_to_the_inventory_baseline() -> None:
    case = scenario_case("service-name-collision", {"--data-parallel-size": 2})
    assert case.args == (
        "Qwen/Qwen2.5-14B-Instruct-AWQ",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "4096",
        "--data-parallel-size",
        "2",
    )
    assert case.env["VLLM_PORT"] == "tcp://10.100.236.130:8000"
    assert case.env["HF_HOME"] == "/root/.cache/huggingface"
    assert case.patterns[0] == "Unknown vLLM environment variable detected: VLLM_SERVICE_HOST"
