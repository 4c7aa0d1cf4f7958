"""Which of an engine's children the local lab signals as its engine core: real vLLM starts
multiprocessing's resource tracker first and titles its engine core `VLLM::EngineCore`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from runner.labs.local.control import _engine_core

# a parent that starts a resource-tracker look-alike first, then a child that titles itself as
# vLLM's engine core does (setproctitle sets the comm too), then waits
PARENT = """
import subprocess, sys, time
tracker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                            "from multiprocessing.resource_tracker import main;main(31)"])
time.sleep(0.3)
core = subprocess.Popen([sys.executable, "-c",
    "open('/proc/self/comm', 'w').write('VLLM::EngineCore'); import time; time.sleep(60)"])
print(tracker.pid, core.pid, flush=True)
time.sleep(60)
"""


def test_the_engine_core_is_the_child_vllm_titles_so_not_the_first(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        _tracker, core = map(int, parent.stdout.readline().split())
        deadline = time.monotonic() + 10
        while Path(f"/proc/{core}/comm").read_text().strip() != "VLLM::EngineCor":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert _engine_core(parent.pid) == core
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


def test_without_a_title_the_first_child_that_is_not_the_tracker(tmp_path: Path) -> None:
    """The lab engine's engine core has no title: the first child that is not the tracker."""
    script = PARENT.replace("open('/proc/self/comm', 'w').write('VLLM::EngineCore'); ", "")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        _tracker, core = map(int, parent.stdout.readline().split())
        assert _engine_core(parent.pid) == core
    finally:
        subprocess.run(["pkill", "-KILL", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()
