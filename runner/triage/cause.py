"""Whether a paste shows an engine's root cause: an exception other than the wrappers vLLM
raises when it finds its engine dead.

vLLM logs an engine's death with its cause: V1's engine core logs "EngineCore encountered a
fatal error." with logger.exception, so the traceback of the exception that killed it follows
(vllm/v1/engine/core.py, EngineCoreProc.run_engine_core, read in 0.8.5 to 0.34.0), and the API
server's EngineDeadError says "See stack trace (above) for the root cause"
(vllm/v1/engine/exceptions.py). V0's AsyncEngineDeadError says "See stack trace above for the
actual cause" (vllm/engine/async_llm_engine.py, _log_task_completion) and the multiprocessing
client's MQEngineDeadError "Inspect the stacktrace to find the original error"
(vllm/engine/multiprocessing/__init__.py, ENGINE_DEAD_ERROR). A paste with none but these is cut
before the cause.
"""

from __future__ import annotations

import re

from runner.triage.cut import _body
from runner.triage.match import Log, _finder

# an exception's line as a traceback ends (`torch.AcceleratorError: ...`, `RuntimeError: ...`),
# its module path allowed; the death wrappers are not causes
_CAUSE = re.compile(
    r"^(?:[a-z_]\w*\.)*(?!(?:Async|MQ)?Engine(?:Dead|Generate)Error\b)"
    r"[A-Z]\w*(?:Error|Exception)(?::\s|$)"
)
_ANY = _finder(r"(?:Error|Exception)(?::\s|$)")


def shows_cause(log: Log) -> bool:
    """Some line of the log is an exception other than an engine's death wrappers."""
    for k in log.candidates(_ANY, 0, windows=False):
        if _CAUSE.match(_body(log.lines[k].text)):
            return True
    return False
