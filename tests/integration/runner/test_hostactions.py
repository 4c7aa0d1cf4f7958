"""A playbook a killed runner left running is found by its mark and awaited (pidfd, no polling)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from runner.labs.compose.hostactions import MARK, in_flight, wait_in_flight


def test_a_left_playbook_is_found_and_awaited() -> None:
    lab = f"unit-{os.getpid()}"
    # the child holds its mark once it has exec'd (before that, /proc shows the parent's
    # environment): it says so on stdout, then lives 2 s
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(2)"],
        env=os.environ | {MARK: lab},
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert in_flight(lab) == [proc.pid]
        assert wait_in_flight(lab, 0.05) == [proc.pid]  # still running after the timeout
        t0 = time.monotonic()
        assert wait_in_flight(lab, 10) == []
        assert time.monotonic() - t0 < 5  # woken by the exit, not by the timeout
    finally:
        proc.kill()
        proc.wait()
    assert in_flight(f"other-{os.getpid()}") == []
