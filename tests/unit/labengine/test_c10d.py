"""PyTorch's NCCL watchdog as the lab engine prints it, and a worker's wait in an all-reduce."""

from __future__ import annotations

import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from labengine import c10d, clock
from labengine.core import STEP_DONE, STEP_END, _await_end, _exchange
from labengine.logs import VllmLog
from labengine.sites import Site, where
from runner.labs.base import LogLine
from runner.spec import signature as sig
from runner.spec.expectations import NodeSignature
from runner.spec.scenario import load_scenario
from vllmfacts.wording import Era, worker_died

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def month_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """The lab clock started on the 4th of a month of 2026 at 10:00:00."""

    def start(month: int) -> None:
        monkeypatch.setenv(clock.CLOCK_ENV, f"2026-{month:02d}-04T10:00:00")
        clock._start.cache_clear()

    yield start
    clock._start.cache_clear()


@pytest.mark.parametrize("month", range(1, 13))
def test_the_date_is_month_times_100_plus_day_not_zero_padded(
    month: int, month_clock: Callable[[int], None]
) -> None:
    # c10/util/Logging.cpp: (tm_mon + 1) * 100 + tm_mday: E104 in January, E1204 in December
    month_clock(month)
    line = c10d.c10_line(2, "E", c10d.TEAR_DOWN, "x")
    assert line.startswith(f"[rank2]:[E{month}04 10:00:0")
    assert line.endswith(f" ProcessGroupNCCL.cpp:{c10d.TEAR_DOWN}] x")


def _launcher_line(rank: int, era: Era) -> str:
    """What the node's launcher prints on stdout once its worker is dead (run_headless's worker
    monitor, vLLM's logger)."""
    out = io.StringIO()
    VllmLog("MainProcess", out, era).error(
        where(era, Site.WORKER_DIED), worker_died(era, f"VllmWorker-{rank}", -6)
    )
    return out.getvalue().rstrip("\n")


def _node_expectations(node: str) -> list[NodeSignature]:
    scenario = load_scenario(ROOT / "scenarios" / "nccl-watchdog-timeout.yaml").scenario
    return [ns for ns in scenario.expect.elsewhere if ns.node == node]


@pytest.mark.parametrize("month", range(1, 13))
def test_the_scenarios_signature_matches_the_watchdog_in_every_month(
    month: int, month_clock: Callable[[int], None]
) -> None:
    month_clock(month)
    lines = c10d.watchdog_timeout(2, 7, 5120, 600_093, 600_000)
    lines.append(_launcher_line(2, Era.V0_19))
    ts = datetime.now(UTC)
    for ns in _node_expectations("node3"):  # rank 2
        result = sig.match([LogLine(ts=ts, text=t) for t in lines], ns.in_order)
        assert result.ok, result
    assert lines[0].endswith(
        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=ALLREDUCE, NumelIn=5120, NumelOut=5120, Timeout(ms)=600000) ran for 600093 "
        "milliseconds before timing out."
    )
    assert (
        lines[3]
        .split("] ", 1)[1]
        .startswith(
            "[PG ID 0 PG GUID 0 Rank 2] Process group watchdog thread terminated with exception: "
            "[Rank 2] Watchdog caught"
        )
    )


@pytest.mark.parametrize("era", list(Era))
@pytest.mark.parametrize(("node", "rank"), [("node3", 2), ("node4", 3)])
def test_the_launchers_line_matches_wherever_a_runtime_puts_it(
    era: Era, node: str, rank: int
) -> None:
    """The watchdog's lines go to stderr, the launcher's to stdout, and a container runtime copies
    each pipe on its own (Docker stamped the launcher's line first in a quarter of the runs on a
    loaded machine): each of the node's pattern lists keeps to one stream, so every merge of the
    two matches."""
    stderr = c10d.watchdog_timeout(rank, 7, 5120, 600_093, 600_000)
    stdout = _launcher_line(rank, era)
    expectations = _node_expectations(node)
    ts = datetime.now(UTC)
    for ns in expectations:
        on = {
            "stderr": sig.match([LogLine(ts=ts, text=t) for t in stderr], ns.in_order).ok,
            "stdout": sig.match([LogLine(ts=ts, text=stdout)], ns.in_order).ok,
        }
        assert list(on.values()).count(True) == 1, (ns.in_order, on)
    for at in range(len(stderr) + 1):
        merged = [LogLine(ts=ts, text=t) for t in [*stderr[:at], stdout, *stderr[at:]]]
        for ns in expectations:
            assert sig.match(merged, ns.in_order).ok, (at, ns.in_order)
    # and the node's launcher line is expected at all (not only PyTorch's)
    assert any(
        not sig.match([LogLine(ts=ts, text=t) for t in stderr], ns.in_order).ok
        for ns in expectations
    )


def test_a_slow_rank_is_only_waited_for_until_the_timeout() -> None:
    ours, theirs = socket.socketpair()
    reader = ours.makefile("rb")
    threading.Timer(0.05, lambda: theirs.sendall(STEP_END)).start()
    assert _await_end(ours, reader, 2.0, 0.01) is None  # the collective completed
    ran = _await_end(ours, reader, 0.2, 0.01)
    assert ran is not None and ran >= 0.2  # nobody completed it: the watchdog's timeout


def test_rank_0_going_away_does_not_end_the_wait() -> None:
    # the parts of an all-reduce come from the other ranks: only the timeout ends it
    ours, theirs = socket.socketpair()
    reader = ours.makefile("rb")
    theirs.close()
    t0 = time.monotonic()
    ran = _await_end(ours, reader, 0.2, 0.01)
    assert ran is not None and time.monotonic() - t0 >= 0.2


def test_the_head_waits_for_its_workers_only_until_the_executors_timeout() -> None:
    head, worker = socket.socketpair()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        _exchange([head], "req-0", 0.2)  # the worker never gives its part
    assert time.monotonic() - t0 >= 0.2
    worker.recv(4096)  # the step
    worker.sendall(STEP_DONE)
    _exchange([head], "req-1", 1.0)  # answered: every rank then learns the collective is done
    assert worker.recv(4096).endswith(STEP_END)
