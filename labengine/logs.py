"""vLLM's log format.

    (APIServer pid=1) INFO 04-19 10:45:24 [utils.py:233] non-default args: {...}

Every log record carries the `(ProcessName pid=N) ` prefix, on each of its lines. What else a
process writes depends on the release: vLLM 0.19 decorates stdout and stderr themselves
(`decorate_logs` wraps their `write`), so tracebacks, multiprocessing's `Process EngineCore:`
and tqdm's bars carry the prefix too; vLLM 0.33 puts the process name into its log format
instead (`set_vllm_process_name`), and those lines come out bare. Timestamps are the process's
local time, no year or zone, padded (vllm/logger.py `_DATE_FORMAT = "%m-%d %H:%M:%S"`, the
same from 0.2.7 to 0.33.0), on the lab engine's clock (labengine.clock). The `[file:line]` tags
are the ones real vLLM prints for the same message.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import NamedTuple, TextIO

from labengine import clock
from vllmfacts.wording import Era, era_of


class Frame(NamedTuple):
    """One frame of a Python traceback: `File "file", line N, in function`, then the code and,
    where Python 3.12 prints one, the caret line under it (`carets`, the text after the code's
    four-space indent: spaces up to the expression, then `^`). A frame of compiled code
    (uvloop's `loop.pyx`) has no source line: `code` is empty and only the `File` line prints."""

    file: str
    line: int
    function: str
    code: str
    carets: str = ""


class VllmLog:
    """One process's output. `decorated`: the process called vLLM's `decorate_logs` (the API
    server and the engine core do; `vllm serve`'s main process with data parallelism, which
    only launches API servers, does not: 0.19 prints its lines bare, 0.33 names it
    `MainProcess` in its records)."""

    def __init__(
        self,
        process_name: str,
        stream: TextIO | None = None,
        era: Era | None = None,
        *,
        decorated: bool = True,
    ) -> None:
        self.process_name = process_name
        self.stream = stream or sys.stdout
        self.pid = os.getpid()
        # a lab engine process speaks one era, the one its environment names
        self.era = era or era_of(dict(os.environ))
        self.decorated = decorated

    def rebind(self, process_name: str) -> None:
        """After fork, in a process that decorates its logs: same stream, new name and pid."""
        self.process_name = process_name
        self.pid = os.getpid()
        self.decorated = True

    @property
    def prefix(self) -> str:
        return f"({self.process_name} pid={self.pid}) "

    def raw(self, text: str) -> None:
        """Write lines as the process's stdout has them: prefixed where vLLM decorates the
        stream itself (0.19), bare where only its log records carry the prefix (0.33)."""
        self._write(text, self.era is Era.V0_19 and self.decorated)

    def _write(self, text: str, prefixed: bool) -> None:
        prefix = self.prefix if prefixed else ""
        out = "".join(prefix + line + "\n" for line in text.splitlines())
        self.stream.write(out)
        self.stream.flush()

    def blank(self) -> None:
        """An empty line (tqdm's closing newline)."""
        self.raw("\n")

    def _log(self, level: str, where: str, msg: str) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S", clock.localtime())
        lines = msg.splitlines() or [""]
        head = f"{level} {stamp} [{where}] "
        # 0.33's log format names the process always; 0.19's records are prefixed by the
        # decorated stream alone
        prefixed = self.era is Era.V0_33 or self.decorated
        self._write("\n".join(head + line for line in lines), prefixed)

    def info(self, where: str, msg: str) -> None:
        self._log("INFO", where, msg)

    def warning(self, where: str, msg: str) -> None:
        self._log("WARNING", where, msg)

    def error(self, where: str, msg: str) -> None:
        self._log("ERROR", where, msg)

    def traceback(self, frames: list[Frame], final: str) -> None:
        """A Python traceback with vLLM's real call path, ending in `final` (Type: message)."""
        self.raw("\n".join(traceback_lines(frames, final)))

    def logged_exception(self, where: str, msg: str, frames: list[Frame], final: str) -> None:
        """`logger.exception(msg)`: vLLM's formatter puts the record's head (`ERROR <ts>
        [file:line] `) on the message and on every line of the traceback after it."""
        self._log("ERROR", where, "\n".join([msg, *traceback_lines(frames, final)]))

    def process_died(self, name: str, frames: list[Frame], final: str) -> None:
        """What multiprocessing prints when a process's target raises: `Process <name>:`, then
        the traceback, without a record head."""
        self.raw("\n".join([f"Process {name}:", *traceback_lines(frames, final)]))

    def exception(self, exc: BaseException) -> None:
        self.raw("".join(traceback.format_exception(exc)))


def traceback_lines(frames: list[Frame], final: str) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for file, line, func, code, carets in frames:
        lines.append(f'  File "{file}", line {line}, in {func}')
        if code:
            lines.append(f"    {code}")
        if carets:
            lines.append(f"    {carets}")
    lines.append(final)
    return lines
