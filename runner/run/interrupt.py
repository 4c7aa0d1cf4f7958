"""Interrupts: Ctrl-C and SIGTERM (a CI job cancelled, `kill`) stop a run the same way: the
scenario under way cleans up, and the report of what ran is written, marked interrupted. Cleanup
itself must finish: an interrupt during it is ignored, not obeyed."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from runner.results.schema import Interruption

if TYPE_CHECKING:
    from runner.results.schema import ScenarioResult

CLEANING: set[int] = set()  # threads in cleanup: an interrupt must not reach them


class Terminated(KeyboardInterrupt):
    """SIGTERM, as the CLI's handler raises it: a KeyboardInterrupt, so everything that stops
    for Ctrl-C stops for it, told apart only at the end (its exit code, the report's mark)."""


class Interrupted(KeyboardInterrupt):
    """An interrupt the run has handled (cleaned up, reported), carrying what it was."""

    def __init__(self, how: Interruption) -> None:
        super().__init__(how.value)
        self.how = how


def interruption(exc: BaseException) -> Interruption:
    if isinstance(exc, Interrupted):
        return exc.how
    return Interruption.SIGTERM if isinstance(exc, Terminated) else Interruption.SIGINT


class ScenarioInterrupted(Interrupted):
    """A scenario stopped by an interrupt, cleaned up: its result so far."""

    def __init__(self, result: ScenarioResult, how: Interruption) -> None:
        super().__init__(how)
        self.result = result


@contextlib.contextmanager
def shielded_from_sigint() -> Iterator[None]:
    """Signals reach the main thread only, where they are ignored for the duration; a worker
    thread of `--parallel` is marked as cleaning, so that the main thread does not interrupt it
    (runner.run.parallel)."""
    if threading.current_thread() is not threading.main_thread():
        CLEANING.add(threading.get_ident())
        try:
            yield
        finally:
            CLEANING.discard(threading.get_ident())
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
