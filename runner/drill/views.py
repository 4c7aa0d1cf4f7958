"""Who reads the drill's page, and what each may read: pure functions over the drill's status
and events, for the page server.

- The responder's view: the people recovering the lab are there to find out what broke, so
  until the drill has ended it names no scenario (a neutral title), gives no shortcut's `why`
  and no recovery step's name or outcome (a person's action still shows, and whether it is a
  shortcut), and leaves out the timeline's lines from before the hand-over (the injection says
  what it broke). Once the drill has ended, the after-action, it shows everything.
- The facilitator's view: everything, always.

Either view folds a node's crash loop going round into one line with a count, and the load's
users' figures into one line redrawn in place as they move (`lines`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from runner.drill.model import DrillEvent, DrillPhase, DrillStatus, EventKind
from runner.results.drill_record import Actor, ObservedAction

NEUTRAL_TITLE = "gameday drill"
# the drill has ended: its after-action may be read by anyone
ENDED = frozenset(
    {
        DrillPhase.RECOVERED,
        DrillPhase.GAVE_UP,
        DrillPhase.TIMED_OUT,
        DrillPhase.CLEANUP,
        DrillPhase.DONE,
        DrillPhase.ERROR,
    }
)
# what a crash loop's line lets go by without closing it: the symptoms that change with each
# round, and other nodes' events
_LETS_BY = frozenset({EventKind.NODE, EventKind.PROBE, EventKind.ALERT, EventKind.USERS})


class View(enum.StrEnum):
    RESPONDER = "responder"
    FACILITATOR = "facilitator"


def revealed(view: View, status: DrillStatus) -> bool:
    """Whether `view` may read everything of the drill as it is in `status`."""
    return view is View.FACILITATOR or status.phase in ENDED


def _hidden(a: ObservedAction) -> ObservedAction:
    return a.model_copy(update={"step": None, "outcome": None, "why": ""})


def status_for(view: View, status: DrillStatus) -> DrillStatus:
    if revealed(view, status):
        return status
    return status.model_copy(
        update={
            "scenario": "",
            "title": NEUTRAL_TITLE,
            "timeline": (),
            "actions": tuple(_hidden(a) for a in status.actions),
        }
    )


def action_text(a: ObservedAction) -> str:
    """A person's action as the responder reads it during the drill."""
    text = f"{a.kind.value} {', '.join(a.nodes)}: {a.detail}"
    return ("shortcut: " + text) if a.shortcut else text


def event_for(view: View, event: DrillEvent, status: DrillStatus) -> DrillEvent | None:
    """The event as `view` may read it while the drill is as `status` says; None: not at all."""
    if revealed(view, status):
        return event
    if event.kind is EventKind.ACTION:
        try:
            action = _hidden(ObservedAction.model_validate(event.data))
        except ValueError:
            return None
        return event.model_copy(
            update={"text": action_text(action), "data": action.model_dump(mode="json")}
        )
    if event.kind is EventKind.TIMELINE and event.at_s is None:
        return None  # the baseline's, the injection's and the wait's lines
    return event


@dataclass(frozen=True)
class Line:
    """A line of the page's event list: an event, or a node's crash loop folded (`count`
    rounds, seen from `at_s` to `last_at_s`)."""

    id: int  # the seq of its first event
    at_s: float | None
    kind: str
    text: str
    count: int = 1
    last_at_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at_s": self.at_s,
            "kind": self.kind,
            "text": self.text,
            "count": self.count,
            "last_at_s": self.last_at_s,
        }


def _loop_text(node: str, crashes: int, restarts: int) -> str:
    if restarts == 0:
        return f"{node} crashed" if crashes else f"{node} crash-looping"
    text = f"{node} crashed and restarted ×{restarts}"
    return text + (", crashed again" if crashes > restarts else "") + " (restart policy)"


@dataclass
class Lines:
    """Folds events into lines as they come: each `add` says which line the event makes or
    changes. A node's crash loop (its NODE events marked `crash_loop`) is one line while only
    other nodes' events, probe results and alerts come between; anything else (a person's
    action, a hint, a phase) closes it, and the next round starts a new line."""

    _open: dict[str, tuple[Line, int, int]] = field(default_factory=dict)  # node -> line, c, r
    _users: int | None = None  # the seq of the users' line's first event

    def add(self, event: DrillEvent) -> Line:
        if event.kind is EventKind.USERS:
            if self._users is None:
                self._users = event.seq
            return Line(self._users, event.at_s, event.kind.value, event.text)
        loop = event.data.get("crash_loop") if event.kind is EventKind.NODE else None
        node = str(event.data.get("node", ""))
        if not isinstance(loop, dict):
            if event.kind not in _LETS_BY:
                self._open.clear()
            else:
                self._open.pop(node, None)
            return Line(event.seq, event.at_s, event.kind.value, _plain(event))
        crashes, restarts = int(loop.get("crashes", 0)), int(loop.get("restarts", 0))
        if node in self._open:
            line, c, r = self._open[node]
            crashes, restarts = crashes + c, restarts + r
            first_at, first_id = line.at_s, line.id
        else:
            first_at, first_id = event.at_s, event.seq
        line = Line(
            first_id,
            first_at,
            event.kind.value,
            _loop_text(node, crashes, restarts),
            count=max(restarts, 1),
            last_at_s=event.at_s,
        )
        self._open[node] = (line, crashes, restarts)
        return line


def _plain(event: DrillEvent) -> str:
    """The event's text, and who acted when it says."""
    actor = event.data.get("actor") if event.kind in (EventKind.NODE, EventKind.ACTION) else None
    if actor in set(Actor):
        return f"{event.text} ({Actor(actor).label})"
    return event.text


def lines(events: list[DrillEvent]) -> list[Line]:
    """The events as the page lists them, folded."""
    folder = Lines()
    out: dict[int, Line] = {}
    for e in events:
        line = folder.add(e)
        out[line.id] = line
    return list(out.values())
