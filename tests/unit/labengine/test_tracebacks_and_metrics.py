"""The traceback data file and its rendering; the metrics and the throughput line, in-process."""

from __future__ import annotations

import io
import json
from importlib.resources import files

import pytest

from labengine.logs import Frame, VllmLog
from labengine.server.metrics import EngineMetrics, throughput_line
from labengine.tracebacks import Traceback, TracebackDataError, era_tracebacks, frames
from vllmfacts.wording import Era


def test_the_data_file_holds_exactly_the_named_tracebacks() -> None:
    raw = json.loads(files("labengine").joinpath("data", "tracebacks.json").read_text())
    assert sorted(raw) == sorted(e.value for e in Era)
    every = set(Traceback)
    # each era lacks the VLLM_PORT read its release does not make at that point
    assert set(era_tracebacks(Era.V0_19)) == every - {Traceback.CORE_ENVS_CACHE}
    assert set(era_tracebacks(Era.V0_33)) == every - {Traceback.CORE_VLLM_PORT}
    # otel's sync_wrapper stands between a call and each function vLLM instruments
    assert len(frames(Era.V0_19, Traceback.CORE_VLLM_PORT)) == 12
    assert len(frames(Era.V0_33, Traceback.CORE_KV_CACHE)) == 8
    assert [f.function for f in frames(Era.V0_33, Traceback.CORE_KV_CACHE)][:3] == [
        "run_engine_core",
        "sync_wrapper",
        "__init__",
    ]


def test_an_era_without_a_traceback_says_so() -> None:
    with pytest.raises(TracebackDataError, match=r"vLLM 0\.33\.0 has no traceback core_vllm_port"):
        frames(Era.V0_33, Traceback.CORE_VLLM_PORT)


def test_the_kv_check_raises_where_each_era_raises_it() -> None:
    last = {e: frames(e, Traceback.CORE_KV_CACHE)[-1] for e in Era}
    assert last[Era.V0_19].file.endswith("vllm/v1/core/kv_cache_utils.py")
    assert last[Era.V0_33].file.endswith("vllm/v1/core/kv_cache_planning.py")
    assert {f.function for f in last.values()} == {"_check_enough_kv_cache_memory"}


def test_a_traceback_renders_as_python_prints_it() -> None:
    out = io.StringIO()
    log = VllmLog("EngineCore", out)
    log.traceback(frames(Era.V0_19, Traceback.BUSY_LOOP_NCCL), "RuntimeError: NCCL error")
    p = f"(EngineCore pid={log.pid}) "
    core = "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py"
    nccl = "/usr/local/lib/python3.12/dist-packages/vllm/distributed/device_communicators/pynccl.py"
    assert out.getvalue().splitlines() == [
        p + "Traceback (most recent call last):",
        p + f'  File "{core}", line 1101, in run_engine_core',
        p + "    engine_core.run_busy_loop()",
        p + f'  File "{nccl}", line 177, in all_reduce',
        p + "    self.nccl.ncclAllReduce(",
        p + "RuntimeError: NCCL error",
    ]


def test_frames_are_typed() -> None:
    engine = "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine"
    assert frames(Era.V0_19, Traceback.ENGINE_DEAD) == [
        Frame(
            file=f"{engine}/async_llm.py",
            line=663,
            function="output_handler",
            code="outputs = await engine_core.get_output_async()",
            carets="          " + "^" * len("await engine_core.get_output_async()"),
        ),
        Frame(
            file=f"{engine}/core_client.py",
            line=985,
            function="get_output_async",
            code="raise self._format_exception(outputs) from None",
        ),
    ]


def test_carets_and_a_compiled_frame_print_as_python_312_prints_them() -> None:
    out = io.StringIO()
    log = VllmLog("APIServer", out)
    log.traceback(frames(Era.V0_33, Traceback.SERVE_ENGINE_STARTUP)[:8], "X: y")
    lines = [ln.split(") ", 1)[1] for ln in out.getvalue().splitlines()]
    assert lines[1:4] == [
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
    ]
    # uvloop's loop.pyx is compiled: its frame has no source line
    pyx = lines.index('  File "uvloop/loop.pyx", line 1515, in uvloop.loop.Loop.run_until_complete')
    assert lines[pyx + 1].startswith('  File "/usr/local/lib/python3.12/dist-packages/uvloop/')
    assert lines[pyx + 2 : pyx + 4] == ["    return await main", "           ^^^^^^^^^^"]


def test_a_frame_with_carets_but_no_code_is_refused() -> None:
    from labengine.tracebacks import _frame

    with pytest.raises(TracebackDataError, match="carets"):
        _frame("x", {"file": "f", "line": 1, "function": "g", "code": "", "carets": "^^"})
    with pytest.raises(TracebackDataError, match="carets"):
        _frame("x", {"file": "f", "line": 1, "function": "g", "code": "h()", "carets": "^x"})


def samples(m: EngineMetrics) -> list[str]:
    text = m.exposition().decode()
    nine = ("vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
            "vllm:prompt_tokens_total{", "vllm:generation_tokens_total{",
            "vllm:request_success_total{")  # fmt: skip
    return [ln for ln in text.splitlines() if ln.startswith(nine)]


def test_metrics_follow_requests() -> None:
    m = EngineMetrics("qwen")
    lv = 'engine="0",model_name="qwen"'
    m.started(0.25)
    m.started(0.5)
    assert samples(m) == [
        f"vllm:num_requests_running{{{lv}}} 2.0",
        f"vllm:num_requests_waiting{{{lv}}} 0.0",
        f"vllm:kv_cache_usage_perc{{{lv}}} 0.5",
        f"vllm:prompt_tokens_total{{{lv}}} 0.0",
        f"vllm:generation_tokens_total{{{lv}}} 0.0",
        *(
            f'vllm:request_success_total{{engine="0",finished_reason="{r}",model_name="qwen"}} 0.0'
            for r in ("stop", "length", "abort", "error", "repetition")
        ),
    ]
    m.finished(25, 21, "stop")
    m.left()
    m.finished(2, 3, "length")
    m.left()
    m.set_kv_usage(0)
    assert samples(m) == [
        f"vllm:num_requests_running{{{lv}}} 0.0",
        f"vllm:num_requests_waiting{{{lv}}} 0.0",
        f"vllm:kv_cache_usage_perc{{{lv}}} 0.0",
        f"vllm:prompt_tokens_total{{{lv}}} 27.0",
        f"vllm:generation_tokens_total{{{lv}}} 24.0",
        'vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen"} 1.0',
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen"} 1.0',
        *(
            f'vllm:request_success_total{{engine="0",finished_reason="{r}",model_name="qwen"}} 0.0'
            for r in ("abort", "error", "repetition")
        ),
    ]
    assert (m.prompt_total, m.gen_total, m.kv_usage) == (27, 24, 0.0)


def test_throughput_line() -> None:
    # the line vLLM 0.19 prints (loggers.py:127), with this engine's figures
    assert throughput_line(2.5, 210.0, 1, 0.0034) == (
        "Engine 000: Avg prompt throughput: 2.5 tokens/s, Avg generation throughput: 210.0 "
        "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.3%, Prefix cache hit "
        "rate: 0.0%"
    )


def test_no_kv_memory_raises_from_the_same_check_two_branches_earlier() -> None:
    """ "No available memory for the cache blocks" is the check's first `raise`, not the
    shortage's (0.19.1 kv_cache_utils.py:626, 0.33.0 kv_cache_planning.py:57)."""
    for era, line in ((Era.V0_19, 626), (Era.V0_33, 57)):
        short, none = frames(era, Traceback.CORE_KV_CACHE), frames(era, Traceback.CORE_NO_KV_MEMORY)
        assert none[:-1] == short[:-1]
        assert (none[-1].function, none[-1].line, none[-1].code) == (
            "_check_enough_kv_cache_memory",
            line,
            "raise ValueError(",
        )
        assert short[-1].line != line


def test_free_memory_is_refused_in_the_workers_init_device() -> None:
    """0.19.1 v1/worker/utils.py:413, 0.33.0 :762: request_memory, under the worker's
    instrumented init_device, under the executor's constructor."""
    for era, line in ((Era.V0_19, 413), (Era.V0_33, 762)):
        chain = frames(era, Traceback.CORE_FREE_MEMORY)
        assert (chain[-1].function, chain[-1].line) == ("request_memory", line)
        names = [f.function for f in chain]
        assert names[-4:] == ["init_device", "sync_wrapper", "init_device", "request_memory"]
        assert names.count("sync_wrapper") == 3
