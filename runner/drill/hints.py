"""A drill's hints and its acknowledgement: which hints are out, which is next, who acked first.

Hints are released in the scenario's order: one with `after_s` when that many wall seconds have
passed since the hand-over, or the next one not yet released when a person asks. Pure state,
told the time by its caller; the drill publishes what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.results.drill_record import HintView
from runner.spec.scenario import Hint


@dataclass
class Hints:
    hints: list[Hint]
    released: list[HintView] = field(default_factory=list)

    @property
    def left(self) -> int:
        return len(self.hints) - len(self.released)

    def _out(self) -> set[int]:
        return {h.index for h in self.released}

    def due(self, since_handover_s: float, at_s: float) -> list[HintView]:
        """The hints whose delay has passed, released now, in order."""
        out: list[HintView] = []
        for i, h in enumerate(self.hints, 1):
            if i in self._out() or h.after_s is None or h.after_s > since_handover_s:
                continue
            view = HintView(index=i, text=h.text, at_s=at_s, requested=False)
            self.released.append(view)
            out.append(view)
        return out

    def request(self, at_s: float) -> HintView | None:
        """The next hint not released yet (None: all are out)."""
        out = self._out()
        for i, h in enumerate(self.hints, 1):
            if i not in out:
                view = HintView(index=i, text=h.text, at_s=at_s, requested=True)
                self.released.append(view)
                return view
        return None


@dataclass
class Ack:
    at_s: float | None = None

    def ack(self, at_s: float) -> bool:
        """Record the first acknowledgement; False when it was already acknowledged."""
        if self.at_s is not None:
            return False
        self.at_s = at_s
        return True
