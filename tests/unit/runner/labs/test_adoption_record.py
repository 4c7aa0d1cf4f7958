"""What the adopted drivers share (runner.labs.common.adoption): which live specs are gameday's
own changes, and a live runner's renewals of its fault lease (runner.run.lease)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from runner.labs.base import NodeConfig
from runner.labs.common.adoption import deadline, is_own, parse_deadline, remember
from runner.run.lease import LeaseKeeper

BASE = NodeConfig(args=("m", "--max-model-len", "4096"), env={"A": "1"})
FAULT = NodeConfig(args=("m", "--max-model-len", "65536"), env={"A": "1"})
TEAM = NodeConfig(args=("m", "--max-model-len", "8192"), env={"A": "1"})


def test_the_baseline_and_what_gameday_wrote_are_its_own_and_a_new_deployment_is_not() -> None:
    written = remember([], FAULT)
    assert is_own(BASE, BASE, [])
    assert is_own(FAULT, BASE, written)
    assert not is_own(FAULT, BASE, [])
    assert not is_own(TEAM, BASE, written)


def test_the_record_keeps_each_write_once_the_latest_last_and_a_bounded_number() -> None:
    written = remember(remember(remember([], FAULT), BASE), FAULT)
    assert written == [BASE.model_dump(mode="json"), FAULT.model_dump(mode="json")]
    for n in range(40):
        written = remember(written, NodeConfig(args=("m", str(n)), env={}))
    assert len(written) == 16 and written[-1]["args"] == ["m", "39"]


def test_a_deadline_reads_back_in_utc() -> None:
    ends = deadline(60)
    assert parse_deadline(ends.isoformat(), "here") == ends
    assert 55 < (ends.timestamp() - time.time()) <= 60


class _Lab:
    def __init__(self, adopt: Any) -> None:
        self.inventory = SimpleNamespace(lab=SimpleNamespace(name="team", adopt=adopt))
        self.renewals: list[float] = []

    def renew_lease(self) -> None:
        self.renewals.append(time.monotonic())


def test_a_live_runner_renews_its_lease_a_few_times_per_lease_until_it_stops() -> None:
    lab = _Lab(SimpleNamespace(lease_s=5.0))  # a renewal every 1.25 s
    keeper = LeaseKeeper(lab)  # type: ignore[arg-type]
    time.sleep(3.0)
    keeper.stop()
    assert len(lab.renewals) == 2
    time.sleep(1.5)
    assert len(lab.renewals) == 2  # stopped: a killed runner's lease runs out


def test_a_lab_that_adopts_nothing_has_no_lease_to_renew() -> None:
    lab = _Lab(None)
    keeper = LeaseKeeper(lab)  # type: ignore[arg-type]
    assert keeper._thread is None
    keeper.stop()
