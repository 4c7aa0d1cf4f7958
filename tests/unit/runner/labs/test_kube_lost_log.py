"""A crash-looping container whose log the watch could not read before the kubelet dropped it
(it keeps the current and the previous container's only): the same pod's next failure, with the
same exit code, stands in for it (the run's evidence title says whose lines they are)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runner.labs.base import LogLine
from runner.labs.kubernetes.watch import Container, NodeView, PodWatch

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _watch(*incs: Container) -> PodWatch:
    w = PodWatch.__new__(PodWatch)  # the views alone: no API server behind it
    w.views = {"node1": NodeView(incs=list(incs))}
    return w


def _exited(n: int, code: int = 1, uid: str = "u1", lost: bool = False, **kw: object) -> Container:
    logs = [] if lost else [LogLine(ts=T0 + timedelta(seconds=n), text=f"container {n} failed")]
    return Container(
        number=n,
        container_id=f"c{n}",
        started_at=T0 + timedelta(seconds=n),
        finished_at=T0 + timedelta(seconds=n, milliseconds=500),
        code=code,
        pod="vllm-0",
        pod_uid=uid,
        restart_count=n - 1,
        logs=logs,
        logs_lost=lost,
        **kw,  # type: ignore[arg-type]
    )


def test_the_next_failure_of_the_same_pod_stands_in_and_says_so() -> None:
    lost = _exited(1, lost=True)
    w = _watch(lost, _exited(2, lost=True), _exited(3))
    settled, later = w.stand_in("node1", lost)
    assert settled and later is not None and later.number == 3
    assert [ln.text for ln in later.logs or []] == ["container 3 failed"]
    # a surge pod's container between two of the pod's is passed over
    assert _watch(lost, _exited(2, uid="u2"), _exited(3)).stand_in("node1", lost)[1] is not None


def test_none_can_come_for_another_failure_or_a_stop_and_none_yet_while_it_runs() -> None:
    lost = _exited(1, lost=True)
    settled_none = (True, None)
    assert _watch(lost, _exited(2, code=0)).stand_in("node1", lost) == settled_none
    assert _watch(lost, _exited(2, stopped=True)).stand_in("node1", lost) == settled_none
    assert _watch(lost, _exited(2, uid="u2")).stand_in("node1", lost) == (False, None)
    running = _exited(2)
    running.finished_at = None
    assert _watch(lost, running).stand_in("node1", lost) == (False, None)
    assert _watch(lost).stand_in("node1", lost) == (False, None)
    kept = _exited(1)
    assert _watch(kept, _exited(2)).stand_in("node1", kept) == settled_none
