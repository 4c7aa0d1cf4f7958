"""Cleanup must finish: a Ctrl-C or SIGTERM during it is ignored, not obeyed."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

CLEANING: set[int] = set()  # threads in cleanup: an interrupt must not reach them


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
