"""Stall watches for tests: a machine whose CPUs are never contended (the unit tests' default, so
that a verdict there does not depend on how busy the machine running them is), and one contended
a fixed share of any span, past or (as the fake lab stamps its exits ahead of the clock) future."""

from __future__ import annotations

from datetime import UTC, datetime

from runner.run.load import LoadWatch, StallSource, Stretch


class _Still:
    source = StallSource.PSI

    def stalled_s(self) -> float:
        return 0.0


class ContendedWatch(LoadWatch):
    """Contended `share` of every span."""

    def __init__(self, share: float) -> None:
        super().__init__(_Still())
        self.share = share

    def stretch(self, start: datetime, end: datetime | None = None) -> Stretch:
        wall = max(0.0, ((end or datetime.now(UTC)) - start).total_seconds())
        return Stretch(wall, self.share * wall, self.source)


def watch(share: float) -> LoadWatch:
    return ContendedWatch(share)
