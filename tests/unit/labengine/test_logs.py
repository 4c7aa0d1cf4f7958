"""Which lines carry the `(Process pid=N) ` prefix, per release: vLLM 0.19 wraps a decorated
process's stdout and stderr (every line prefixed, records and tracebacks alike); vLLM 0.33 puts
the process name into its log format only (records prefixed, tracebacks and bars bare). Both
checked against real `vllm serve` by bench/differential.py."""

from __future__ import annotations

import io
import os

from labengine.logs import Frame, VllmLog
from vllmfacts.wording import Era

FRAME = [Frame("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())")]


def printed(era: Era, name: str = "APIServer", *, decorated: bool = True) -> list[str]:
    out = io.StringIO()
    log = VllmLog(name, out, era, decorated=decorated)
    log.warning("envs.py:1744", "Unknown vLLM environment variable detected: VLLM_SERVICE_HOST")
    log.traceback(FRAME, "ValueError: boom")
    pid = f"pid={os.getpid()}"
    return [ln.replace(pid, "pid=N").split(" WARNING ")[0] for ln in out.getvalue().splitlines()]


def test_019_prefixes_every_line_of_a_decorated_process() -> None:
    assert printed(Era.V0_19) == ["(APIServer pid=N)"] + ["(APIServer pid=N) " + ln for ln in [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        "    sys.exit(main())",
        "ValueError: boom",
    ]]  # fmt: skip


def test_033_prefixes_log_records_only() -> None:
    assert printed(Era.V0_33) == [
        "(APIServer pid=N)",
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        "    sys.exit(main())",
        "ValueError: boom",
    ]


def test_the_main_process_of_a_data_parallel_serve_is_not_decorated() -> None:
    """0.19: no prefix at all; 0.33: its records name it MainProcess."""
    bare_019 = printed(Era.V0_19, "MainProcess", decorated=False)
    assert bare_019[0].startswith("WARNING") and bare_019[1] == "Traceback (most recent call last):"
    assert printed(Era.V0_33, "MainProcess", decorated=False)[:2] == [
        "(MainProcess pid=N)",
        "Traceback (most recent call last):",
    ]


def test_a_forked_process_decorates_its_logs() -> None:
    out = io.StringIO()
    log = VllmLog("MainProcess", out, Era.V0_19, decorated=False)
    log.rebind("EngineCore")
    log.raw("Process EngineCore:")
    assert out.getvalue() == f"(EngineCore pid={os.getpid()}) Process EngineCore:\n"
