from __future__ import annotations

from datetime import UTC, datetime

from runner import startup
from runner.labs.base import LogLine
from runner.labs.planning import edit_args
from runner.scenario import CaptureCheck, Pattern, Phase
from runner.signature import match

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
    assert r.ok and r.in_order[1].captures["est"] == "976"


def test_order_matters() -> None:
    log = lines("second", "first")
    r = match(log, [Pattern(regex="first"), Pattern(regex="second")])
    assert not r.ok and not r.in_order[1].matched


def test_failed_check_is_reported() -> None:
    r = match(
        lines("len 4096"),
        [Pattern(regex=r"len (?P<n>\d+)", captures={"n": CaptureCheck(eq=131072)})],
    )
    assert not r.ok and r.in_order[0].matched and r.in_order[0].failed_checks


def test_absent() -> None:
    r = match(
        lines("(EngineCore pid=3) hi"), [Pattern(regex="hi")], [Pattern(regex=r"^\(EngineCore")]
    )
    assert not r.ok and r.absent[0].matched


def test_phase_reached() -> None:
    assert startup.reached(lines("(APIServer pid=1) ValidationError")) is Phase.CONFIG_VALIDATION
    assert (
        startup.reached(lines("(APIServer pid=1) x", "(EngineCore pid=2) INFO ... y"))
        is Phase.ENGINE_CORE_INIT
    )
    assert (
        startup.reached(
            lines(
                "(EngineCore_DP0 pid=2) Model loading took 9.38 GiB memory",
                "Available KV cache memory: 0.18 GiB",
            )
        )
        is Phase.KV_CACHE_CHECK
    )
    assert (
        startup.reached(lines("Starting vLLM API server 0 on http://0.0.0.0:8000")) is Phase.SERVING
    )


def test_edit_args() -> None:
    base = ["m", "--gpu-memory-utilization", "0.9", "--max-model-len", "4096", "--enforce-eager"]
    assert edit_args(base, {"--max-model-len": 16384}) == [
        "m",
        "--gpu-memory-utilization",
        "0.9",
        "--max-model-len",
        "16384",
        "--enforce-eager",
    ]
    assert edit_args(base, {"--tensor-parallel-size": 2})[-2:] == ["--tensor-parallel-size", "2"]
    assert edit_args(base, {"--enforce-eager": None}) == base[:-1]
    assert edit_args(base, {"--max-model-len": None}) == [
        "m",
        "--gpu-memory-utilization",
        "0.9",
        "--enforce-eager",
    ]
    assert edit_args(["m", "--max-model-len=4096"], {"--max-model-len": 8}) == [
        "m",
        "--max-model-len",
        "8",
    ]
