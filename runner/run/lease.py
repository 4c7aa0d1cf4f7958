"""A running runner's heartbeat on an adopted deployment: its fault lease is pushed forward a
few times per lease while the run lives, so only a runner that is gone (killed with -9, its
machine lost) lets the lease run out, and `gameday cleanup --expired` then puts the deployment
back (runner.labs.common.adoption)."""

from __future__ import annotations

import contextlib
import threading

from runner.errors import GamedayError
from runner.labs.base import LabDriver
from runner.labs.common.adoption import RENEWALS_PER_LEASE


class LeaseKeeper:
    """Renews `lab`'s lease every lease/RENEWALS_PER_LEASE seconds until `stop`; nothing on a lab
    that adopts nothing."""

    def __init__(self, lab: LabDriver) -> None:
        self.lab = lab
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        adopt = lab.inventory.lab.adopt
        if adopt is not None:
            self._thread = threading.Thread(
                target=self._run,
                args=(adopt.lease_s / RENEWALS_PER_LEASE,),
                name=f"lease {lab.inventory.lab.name}",
                daemon=True,
            )
            self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            # a renewal that fails is tried again at the next beat; the lease is long enough
            with contextlib.suppress(GamedayError):
                self.lab.renew_lease()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
