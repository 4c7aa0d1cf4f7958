"""bench/conformance.py's reading of vLLM's source and of the lab engine's output, on small
sources written here (the real wheels are read by `make conformance`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from labengine.logs import Frame

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("conformance", ROOT / "bench" / "conformance.py")
assert _spec is not None and _spec.loader is not None
conformance = importlib.util.module_from_spec(_spec)
sys.modules["conformance"] = conformance
_spec.loader.exec_module(conformance)

SOURCE = """
import logging
logger = logging.getLogger(__name__)

def check(available, needed, est, key):
    if available <= 0:
        raise ValueError("No available memory for the cache blocks. Try harder.")
    estimated_msg = ""
    if est > 0:
        estimated_msg = f"The estimated maximum model length is {est}. "
    raise ValueError(f"Needed ({needed} GiB) is over ({available} GiB). {estimated_msg}Sorry.")

def start(ip, port):
    logger.info("Starting vLLM server on %s", f"http://{ip}:{port}")
    logger.debug("world_size=%d rank=%d", 1, 0)
    for key in ("a", "b"):
        msg = f"derived ({key}=1)"
        logger.warning("%s %s", msg, "take care")

def timed(message: str = "torch.compile took %.2f s in total"):
    logger.info_once(message, 1.0)

_BAR_FORMAT = (
    "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} "
    "[{elapsed}<{remaining}, {rate_fmt}]\\n"
)

def shards(files):
    return tqdm(files, desc="Loading safetensors checkpoint shards", bar_format=_BAR_FORMAT)
"""


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> list[object]:
    tree = tmp_path_factory.mktemp("wheel") / "vllm"
    tree.mkdir()
    (tree / "mod.py").write_text(SOURCE)
    return list(conformance.templates(tree))


@pytest.mark.parametrize(
    ("kind", "text", "where"),
    [
        ("exception", "No available memory for the cache blocks. Try harder.", "vllm/mod.py:7"),
        (
            "exception",
            "Needed (3.0 GiB) is over (0.18 GiB). "
            "The estimated maximum model length is 976. Sorry.",
            "vllm/mod.py:11",
        ),
        ("exception", "Needed (3.0 GiB) is over (0.18 GiB). Sorry.", "vllm/mod.py:11"),
        ("INFO", "Starting vLLM server on http://0.0.0.0:8000", "vllm/mod.py:14"),
        ("WARNING", "derived (max_position_embeddings=1) take care", "vllm/mod.py:18"),
        ("INFO", "torch.compile took 26.00 s in total", "vllm/mod.py:21"),
    ],
)
def test_a_printed_text_matches_its_template(
    found: list[object], kind: str, text: str, where: str
) -> None:
    t = conformance.match(conformance.Printed("case", kind, "x.py:1", text), found)
    assert t is not None and t.where == where


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("INFO", "world_size=1 rank=0"),  # logged at DEBUG only
        ("WARNING", "Starting vLLM server on http://0.0.0.0:8000"),  # wrong level
        ("INFO", "Starting vLLM API server 0 on http://0.0.0.0:8000"),  # not vLLM's words
        ("exception", "Needed (3.0 GiB) is over (0.18 GiB). The estimate is 976. Sorry."),
    ],
)
def test_text_not_in_the_source_is_a_difference(found: list[object], kind: str, text: str) -> None:
    assert conformance.match(conformance.Printed("case", kind, "x.py:1", text), found) is None


def test_printed_reads_records_exceptions_and_pydantic_messages() -> None:
    out = "\n".join(
        [
            "(EngineCore pid=9) INFO 12-01 03:00:00 [core.py:93] Initializing a V1 LLM engine",
            "(EngineCore pid=9) ERROR 12-01 03:00:00 [core.py:1108] EngineCore failed to start.",
            "(EngineCore pid=9) ERROR 12-01 03:00:00 [core.py:1108] Traceback (most recent call "
            "last):",
            '(EngineCore pid=9) ERROR 12-01 03:00:00 [core.py:1108]   File "a.py", line 1, in f',
            "(EngineCore pid=9) ERROR 12-01 03:00:00 [core.py:1108]     raise ValueError(x)",
            "(EngineCore pid=9) ERROR 12-01 03:00:00 [core.py:1108] ValueError: no memory",
            "(EngineCore pid=9) Process EngineCore:",
            "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error "
            "for ParallelConfig",
            "(APIServer pid=1)   Value error, World size (2) is larger. If intentional:",
            "(APIServer pid=1) - ray, set it. [type=value_error, input_value=x, input_type=y]",
            "(APIServer pid=1) INFO:     Application startup complete.",
        ]
    )
    got = [(p.kind, p.where, p.text) for p in conformance.printed("case", out)]
    assert got == [
        ("INFO", "core.py:93", "Initializing a V1 LLM engine"),
        ("ERROR", "core.py:1108", "EngineCore failed to start."),
        ("exception", "ValueError", "no memory"),
        (
            "exception",
            "ValidationError",
            "World size (2) is larger. If intentional:\n- ray, set it.",
        ),
    ]


def test_a_progress_bar_is_its_description_and_vllms_bar_format(found: list[object]) -> None:
    line = (
        "Loading safetensors checkpoint shards:   3% Completed | 1/29 [02:31<1:10:29, 151.05s/it]"
    )
    got = conformance.printed("case", f"(EngineCore pid=9) {line}\n(EngineCore pid=9) ")
    assert [(p.kind, p.where, p.text) for p in got] == [
        ("progress", "tqdm desc", "Loading safetensors checkpoint shards"),
        ("progress", "tqdm bar_format", conformance.BAR_FORMAT),
    ]
    assert [conformance.match(p, found).where for p in got] == ["vllm/mod.py:29", "vllm/mod.py:24"]
    # a description that is not a whole string of the source is a difference, however many
    # templates of placeholders alone would take it
    other = conformance.Printed("case", "progress", "tqdm desc", "Loading safetensors shards")
    assert conformance.match(other, found) is None


def test_env_names_are_the_vllm_keys_of_environment_variables(tmp_path: Path) -> None:
    (tmp_path / "envs.py").write_text(
        "environment_variables: dict = {\n"
        '    "VLLM_PORT": lambda: 1,\n    "CUDA_HOME": lambda: 2,\n'
        '    "VLLM_HOST_IP": lambda: 3,\n}\n'
    )
    assert conformance.env_names(tmp_path) == {"VLLM_PORT", "VLLM_HOST_IP"}


# ---- locations and traceback frames: each check fails on purpose -------------------------------


def _wheel(tmp_path: Path) -> Path:
    mod = tmp_path / "vllm" / "mod.py"
    mod.parent.mkdir()
    mod.write_text("def outer():\n    x = 1\n    raise ValueError(\n        x)\n\n\ny = 2\n")
    return tmp_path / "vllm"


def _frame(file: str, line: int, function: str, code: str, carets: str = "") -> Frame:
    return Frame(f"/usr/local/lib/python3.12/dist-packages/{file}", line, function, code, carets)


def test_a_frame_of_the_wheel_passes(tmp_path: Path) -> None:
    good = _frame("vllm/mod.py", 3, "outer", "raise ValueError(")
    assert conformance.frame_difference(_wheel(tmp_path), good) is None


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (_frame("vllm/mod.py", 2, "outer", "raise ValueError("), "line 2 holds 'x = 1'"),
        (_frame("vllm/other.py", 3, "outer", "raise ValueError("), "no such file"),
        (_frame("vllm/mod.py", 7, "outer", "y = 2"), "not inside a function outer"),
        (_frame("vllm/mod.py", 3, "inner", "raise ValueError("), "not inside a function inner"),
        (_frame("vllm/mod.py", 99, "outer", "raise ValueError("), "has 7 lines"),
        (Frame("/usr/lib/python3.12/x.py", 1, "f", "g()"), "outside the vllm package"),
    ],
)
def test_a_wrong_frame_is_a_difference(tmp_path: Path, frame: Frame, says: str) -> None:
    diff = conformance.frame_difference(_wheel(tmp_path), frame)
    assert diff is not None and says in diff


def test_a_location_must_be_the_calls_basename_and_line(tmp_path: Path) -> None:
    mod = tmp_path / "vllm" / "config" / "model.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(
        "import logging\nlogger = logging.getLogger()\n"
        'logger.info(\n    "Using max model len %s", 1)\n'
    )
    found = conformance.templates(tmp_path / "vllm")
    p = conformance.Printed("case", "INFO", "model.py:3", "Using max model len 4096")
    calls = conformance.location_candidates(p, found)
    assert [c.where for c in calls] == ["vllm/config/model.py:3"]
    assert conformance.located("model.py:3", calls)
    assert not conformance.located("model.py:4", calls)  # wrong line
    assert not conformance.located("scheduler.py:3", calls)  # wrong file


# ---- traceback chains and carets: each check fails on purpose -----------------------------------

CHAIN_SOURCE = """\
import contextlib
from vllm.tracing import instrument


def outer():
    value = middle(1)
    return value


@instrument(span_name="x")
def middle(n):
    with opened() as f:
        return f


@contextlib.contextmanager
def opened():
    yield inner()


def inner():
    raise ValueError(
        "no")
"""


def _chain_wheel(tmp_path: Path) -> Path:
    mod = tmp_path / "vllm" / "mod.py"
    mod.parent.mkdir()
    mod.write_text(CHAIN_SOURCE)
    otel = tmp_path / "vllm" / "tracing" / "otel.py"
    otel.parent.mkdir()
    otel.write_text(
        "def instrument_otel(func):\n    def sync_wrapper(*a):\n        return func(*a)\n"
    )
    return tmp_path / "vllm"


WRAPPER = _frame("vllm/tracing/otel.py", 3, "sync_wrapper", "return func(*a)", "       ^^^^^^^^")
CHAIN = [
    _frame("vllm/mod.py", 6, "outer", "value = middle(1)", "        ^^^^^^^^^"),
    WRAPPER,
    _frame("vllm/mod.py", 12, "middle", "with opened() as f:", "     ^^^^^^^^"),
    Frame("/usr/lib/python3.12/contextlib.py", 137, "__enter__", "return next(self.gen)"),
    _frame("vllm/mod.py", 18, "opened", "yield inner()", "      ^^^^^^^"),
    _frame("vllm/mod.py", 22, "inner", "raise ValueError("),
]


def test_a_complete_chain_has_no_skipped_link(tmp_path: Path) -> None:
    tree = _chain_wheel(tmp_path)
    assert [p for _, p in conformance.chain_problems(tree, CHAIN)] == ["", "", "", ""]


@pytest.mark.parametrize(
    ("drop", "says"),
    [
        (1, "skips otel's sync_wrapper"),
        (3, "skips contextlib's __enter__"),
        (4, "calls none of inner"),
    ],
)
def test_a_skipped_frame_is_a_skipped_link(tmp_path: Path, drop: int, says: str) -> None:
    tree = _chain_wheel(tmp_path)
    problems = [p for _, p in conformance.chain_problems(tree, CHAIN[:drop] + CHAIN[drop + 1 :])]
    assert any(says in p for p in problems), problems


def test_carets_follow_python_312(tmp_path: Path) -> None:
    tree = _chain_wheel(tmp_path)
    for i, frame in enumerate(CHAIN):
        if conformance.in_wheel(frame) is not None:
            want = conformance.expected_carets(tree, frame, conformance.call_target(CHAIN, i))
            assert want == frame.carets, frame


# the engine core's utility call: a lambda built elsewhere, getattr dispatch, `raise e`
UTILITY_SOURCE = """\
def invoke(get_result):
    result = get_result()


def handle(self, name):
    get_result = lambda: (
        (method := getattr(self, name))
        and method(1)
    )
    invoke(get_result)


def add(n):
    try:
        check(n)
    except Exception as e:
        raise e


def check(n):
    raise ValueError(n)
"""
UTILITY = [
    _frame("vllm/core.py", 2, "invoke", "result = get_result()", "         ^^^^^^^^^^^^"),
    _frame("vllm/core.py", 8, "<lambda>", "and method(1)", "    ^^^^^^^^^"),
    _frame("vllm/core.py", 17, "add", "raise e"),
    _frame("vllm/core.py", 15, "add", "check(n)"),
    _frame("vllm/core.py", 21, "check", "raise ValueError(n)"),
]


def test_a_utility_calls_lambda_and_a_re_raise_are_links(tmp_path: Path) -> None:
    mod = tmp_path / "vllm" / "core.py"
    mod.parent.mkdir()
    mod.write_text(UTILITY_SOURCE)
    tree = tmp_path / "vllm"
    assert [conformance.frame_difference(tree, f) for f in UTILITY] == [None] * 5
    assert [p for _, p in conformance.chain_problems(tree, UTILITY)] == ["", "", "", ""]
    for i, frame in enumerate(UTILITY):
        want = conformance.expected_carets(tree, frame, conformance.call_target(UTILITY, i))
        assert want == frame.carets, frame
    # a `raise e` is a link only to its own function's earlier line, where the exception began
    later = [*UTILITY[:3], _frame("vllm/core.py", 21, "check", "raise ValueError(n)")]
    assert [p for _, p in conformance.chain_problems(tree, later)][-1] != ""
