"""What the adopted drivers (a Compose project, a Kubernetes workload) share: which live specs
are gameday's own changes, and the fault lease.

gameday remembers each configuration it writes on an adopted node, before writing it. A live
spec that is neither the saved baseline nor one of those was deployed by the team after the
adoption: gameday never writes its old baseline over it (an undo leaves that node alone, `lab
down` lets go of it), and `lab up` and `run` stop and offer to re-adopt it.

While an adopted node runs a change of gameday's, a deadline is recorded with the change (the
fault lease): a running runner pushes it forward, and `gameday cleanup --expired`, run by cron or
a Kubernetes CronJob, puts the deployment back once it has passed, so a runner killed with -9
does not leave the team's deployment broken until someone notices.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.errors import LabError
from runner.labs.base import NodeConfig

WRITTEN_KEPT = 16  # configurations remembered per node (a run writes two or three)
RENEWALS_PER_LEASE = 4  # how often a running runner pushes its lease forward, per lease


def remember(written: Sequence[Any], cfg: NodeConfig) -> list[Any]:
    """The record of configurations gameday wrote on a node, with `cfg` last."""
    dumped = cfg.model_dump(mode="json")
    return [*(w for w in written if w != dumped), dumped][-WRITTEN_KEPT:]


def is_own(live: NodeConfig, baseline: NodeConfig, written: Sequence[Any]) -> bool:
    """Whether a node's live spec is the baseline or a configuration gameday wrote."""
    return live == baseline or live.model_dump(mode="json") in written


def deadline(lease_s: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=lease_s)


def parse_deadline(text: str, where: str) -> datetime:
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except (TypeError, ValueError):
        raise LabError(
            f"{where}: the fault lease's deadline {text!r} is not a time",
            hint="check the deployment by hand, then remove the lease",
        ) from None


def redeployed_error(what: str, nodes: Sequence[str], inventory_path: str) -> LabError:
    """The refusal, with its offer, for an adopted deployment deployed anew since adoption."""
    return LabError(
        f"{what}: {', '.join(nodes)} changed since gameday adopted it (its args or env are "
        "neither the baseline gameday saved nor a change gameday made): the team deployed it "
        "anew; gameday does not write its old baseline over it, and nothing was touched",
        hint=f"to take what runs now as the baseline: gameday lab up --lab {inventory_path} "
        "--readopt",
    )
