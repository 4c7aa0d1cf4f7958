"""bench/differential.py: the normalised failure lines, the METADATA filter and the comparison."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from differential import (  # noqa: E402
    ARGS_LINE,
    LAB_PREFIXES,
    Row,
    TbFrame,
    cases,
    compare,
    compare_tracebacks,
    failure_lines,
    normalise,
    scenario_case,
    tracebacks,
)
from refvenv import cpu_requirements  # noqa: E402


def test_normalise_strips_the_pid_timestamp_and_model_folder_and_keeps_the_process() -> None:
    line = (
        "(EngineCore_DP0 pid=4242) ERROR 12-01 05:10:11 [core.py:1010] "
        "EngineCore failed to start. pid=4242 model=/tmp/x/models/Qwen/Q"
    )
    assert normalise(line, "/tmp/x/models") == (
        "(EngineCore_DP0) ERROR <ts> [core.py:1010] EngineCore failed to start. pid <pid> "
        "model=Qwen/Q"
    )
    assert normalise("(APIServer pid=7) INFO 01-02 03:04:05.123 [a.py:1] hi") == (
        "(APIServer) INFO <ts> [a.py:1] hi"
    )
    # 0.33 prints an uncaught traceback's lines bare, 0.19 prefixed: the two do not compare equal
    bare, prefixed = "ValueError: too long", "(APIServer pid=7) ValueError: too long"
    assert normalise(bare) != normalise(prefixed)


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


def test_normalise_hides_the_free_port_in_the_arguments_line() -> None:
    line = "(APIServer pid=7) INFO 12-01 00:00:00 [startup.py:96] non-default args: {'port': 41234}"
    assert normalise(line) == (
        "(APIServer) INFO <ts> [startup.py:96] non-default args: {'port': <port>}"
    )


def test_every_case_but_a_headless_one_compares_the_arguments_line() -> None:
    """run_headless logs no arguments; every other start logs them first."""
    for case in cases():
        headless = "--headless" in case.args
        assert (case.patterns[0] == ARGS_LINE) is not headless, case.name
        assert ARGS_LINE not in case.patterns[1:], case.name


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
        "(APIServer) ERROR <ts> [x.py:2] World size (2) is larger",
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


REAL = """\
(APIServer pid=5) INFO 12-01 00:00:00 [x.py:1] start
(APIServer pid=5) Traceback (most recent call last):
(APIServer pid=5)   File "/ref/bin/vllm", line 8, in <module>
(APIServer pid=5)     sys.exit(main())
(APIServer pid=5)              ^^^^^^
(APIServer pid=5)   File "/ref/site/uvloop/__init__.py", line 92, in run
(APIServer pid=5)     return runner.run(wrapper())
(APIServer pid=5)            ^^^^^^^^^^^^^^^^^^^^^
(APIServer pid=5)   File "/py311/asyncio/runners.py", line 118, in run
(APIServer pid=5)     return self._loop.run_until_complete(task)
(APIServer pid=5)   File "uvloop/loop.pyx", line 1515, in uvloop.loop.Loop.run_until_complete
(APIServer pid=5)   File "/py311/contextlib.py", line 210, in __aenter__
(APIServer pid=5)     return await anext(self.gen)
(APIServer pid=5)   File "/ref/site/vllm/a.py", line 3, in f
(APIServer pid=5)     async with g(
(APIServer pid=5)   File "/ref/site/vllm/b.py", line 7, in g
(APIServer pid=5)     raise ValueError(
(APIServer pid=5) ValueError: no
"""
REAL_PREFIXES = (("/ref/site/", "<site>/"), ("/py311/", "<stdlib>/"), ("/ref/bin/", "<bin>/"))


def test_tracebacks_read_frames_code_and_carets_after_the_prefixes() -> None:
    (block,) = tracebacks(REAL, REAL_PREFIXES)
    assert block[0] == TbFrame(
        "<bin>/vllm", 8, "<module>", "    sys.exit(main())", "             ^^^^^^"
    )
    assert block[3] == TbFrame("uvloop/loop.pyx", 1515, "uvloop.loop.Loop.run_until_complete")
    assert block[-1] == TbFrame("<site>/vllm/b.py", 7, "g", "    raise ValueError(")
    assert len(block) == 7


def _lab(lines: list[str]) -> str:
    return "\n".join(["Traceback (most recent call last):", *lines, "ValueError: no"])


LAB_312 = [
    '  File "/usr/local/bin/vllm", line 10, in <module>',
    "    sys.exit(main())",
    "             ^^^^^^",
    '  File "/usr/local/lib/python3.12/dist-packages/uvloop/__init__.py", line 96, in run',
    "    return __asyncio.run(",
    '  File "/usr/lib/python3.12/asyncio/runners.py", line 195, in run',
    "    return runner.run(main)",
    '  File "/usr/lib/python3.12/asyncio/runners.py", line 118, in run',
    "    return self._loop.run_until_complete(task)",
    '  File "uvloop/loop.pyx", line 1515, in uvloop.loop.Loop.run_until_complete',
    '  File "/usr/lib/python3.12/contextlib.py", line 210, in __aenter__',
    "    return await anext(self.gen)",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/a.py", line 3, in f',
    "    async with g(",
    "               ^^",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/b.py", line 7, in g',
    "    raise ValueError(",
]


def test_another_python_leaves_out_the_runner_and_stdlib_lines_and_with_carets() -> None:
    real = tracebacks(REAL, REAL_PREFIXES)
    (row,) = compare_tracebacks("c", real, tracebacks(_lab(LAB_312), LAB_PREFIXES), False)
    assert row.equal, row.first_difference
    assert (row.real, row.lab, row.compared) == (7, 8, 5)
    # on the same Python every frame counts: the runner frames then differ
    (same,) = compare_tracebacks("c", real, tracebacks(_lab(LAB_312), LAB_PREFIXES), True)
    assert not same.equal


def test_a_missing_or_different_frame_is_reported() -> None:
    real = tracebacks(REAL, REAL_PREFIXES)
    lab = [ln for ln in LAB_312 if "contextlib" not in ln and "anext" not in ln]
    (row,) = compare_tracebacks("c", real, tracebacks(_lab(lab), LAB_PREFIXES), False)
    assert row.first_difference.startswith("frame 5: real `<stdlib>/contextlib.py:0 in __aenter__")
    moved = [ln.replace("line 7, in g", "line 8, in g") for ln in LAB_312]
    (row,) = compare_tracebacks("c", real, tracebacks(_lab(moved), LAB_PREFIXES), False)
    assert row.first_difference.startswith("frame 7: real `<site>/vllm/b.py:7")
    (row,) = compare_tracebacks("c", real, [], False)
    assert row.first_difference == "the lab engine prints no such traceback"
