"""The lab engine with its clock set to each month of a year (VLLM_LAB_CLOCK_START): it stamps
its lines as vLLM and PyTorch do that month, and every scenario signature it can show still
matches. PyTorch's c10 logger prints the date unpadded (`[W305 ...]` in March, `[W1229 ...]` in
December), so a pattern written against December's lines alone misses nine months of logs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.labs.common.servicelinks import kubernetes_service_env
from runner.labs.local.control import _engine_core
from runner.spec.scenario import LoadedScenario, load_scenario
from runner.spec.signature import match

ROOT = Path(__file__).resolve().parents[3]
QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"
# one day a month: single-digit days and months give three-digit c10 dates
LAUNCH = [sys.executable, "-m", "labengine", "serve", QWEN]
HEADLESS = [
    "--headless",
    "--nnodes",
    "2",
    "--node-rank",
    "1",
    "-tp",
    "2",
    "--master-addr",
    "127.0.0.1",
]
DAYS = [9, 28, 31, 1, 15, 4, 7, 31, 30, 1, 11, 29]


@dataclass(frozen=True)
class Line:
    text: str


def scenario(name: str) -> LoadedScenario:
    return load_scenario(ROOT / "scenarios" / f"{name}.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_env(start: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    return env | {"GAMEDAY_TIME_SCALE": "1000", "VLLM_LAB_CLOCK_START": start, **extra}


def serve(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LAUNCH, "--host", "127.0.0.1", "--port", str(free_port()), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextmanager
def killed_at_exit(procs: list[subprocess.Popen[str]]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def engine_death(env: dict[str, str]) -> str:
    """The serving engine's log after its engine core is killed at run time."""
    p = serve(env=env)
    with killed_at_exit([p]):
        assert p.stdout is not None
        lines = []
        for line in p.stdout:
            lines.append(line)
            if "Application startup complete" in line:
                break
        core = _engine_core(p.pid)
        assert core is not None
        os.kill(core, signal.SIGKILL)
        lines += p.stdout.read()
    return "".join(lines)


def worker_heartbeat(env: dict[str, str]) -> str:
    """A headless worker's stderr once rank 0's store goes away."""
    with socket.socket() as store:
        store.bind(("127.0.0.1", 0))
        store.listen()
        p = subprocess.Popen(
            [*LAUNCH, *HEADLESS, "--master-port", str(store.getsockname()[1])],
            env=env | {"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        with killed_at_exit([p]):
            conn, _ = store.accept()
            conn.close()
            assert p.stderr is not None
            return p.stderr.readline()


def holds(name: str, text: str, **where: str) -> None:
    """The scenario's signature, captures and all, in `text` (its first `elsewhere` signature
    with `where=elsewhere`)."""
    sc = scenario(name).scenario
    if where.get("where") == "elsewhere":
        pats = sc.expect.elsewhere[0].in_order
    else:
        assert sc.expect.signature is not None
        pats = sc.expect.signature.in_order
    result = match([Line(t) for t in text.splitlines()], pats)
    missed = [r.pattern.regex for r in result.in_order if not r.ok]
    assert not missed, (name, missed, text[-2000:])


@pytest.mark.parametrize("month", range(1, 13))
def test_every_month_prints_as_vllm_and_pytorch_do(month: int) -> None:
    day = DAYS[month - 1]
    start = f"2026-{month:02d}-{day:02d}T13:43:33"
    env = engine_env(start)
    t0 = time.monotonic()
    links = kubernetes_service_env("vllm", "10.100.0.1", 8000)
    starts = {
        "kv-cache-shortage": serve(
            "--gpu-memory-utilization", "0.5", "--max-model-len", "16384", env=env
        ),
        "context-window-overflow": serve("--max-model-len", "131072", env=env),
        "tp-mismatch": serve("--tensor-parallel-size", "2", env=env),
        "service-name-collision": serve(env=env | links),
    }
    with killed_at_exit(list(starts.values())):
        outputs = {name: p.communicate(timeout=60)[0] for name, p in starts.items()}
    died = engine_death(env)
    heartbeat = worker_heartbeat(env)
    assert time.monotonic() - t0 < 60

    for name, out in outputs.items():
        holds(name, out)
    holds("engine-core-death", died)
    holds("head-only-restart", died)
    holds("head-only-restart", heartbeat, where="elsewhere")

    # vLLM's records: `%m-%d %H:%M:%S`, padded (vllm/logger.py _DATE_FORMAT)
    stamps = re.findall(r"^\(\w+ pid=\d+\) (?:INFO|WARNING|ERROR) (\d\d-\d\d) ", died, re.M)
    assert stamps and set(stamps) == {f"{month:02d}-{day:02d}"}
    # PyTorch's: `(tm_mon + 1) * 100 + tm_mday`, unpadded, and nine digits of nanoseconds
    assert re.match(
        rf"\[rank1\]:\[W{month * 100 + day} 13:43:3\d\.\d{{9}} ProcessGroupNCCL\.cpp:1826\] ",
        heartbeat,
    ), heartbeat


def test_a_clock_start_that_is_no_date_is_refused_at_config_resolution() -> None:
    p = serve(env=engine_env("next tuesday"))
    out = p.communicate(timeout=60)[0]
    assert p.returncode == 1
    assert (
        "ValueError: VLLM_LAB_CLOCK_START='next tuesday': not an ISO 8601 date and time (the lab "
        "engine's clock start, e.g. 2026-06-04T13:43:33)"
    ) in out
