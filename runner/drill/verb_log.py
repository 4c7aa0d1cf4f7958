"""What `gameday lab` verbs did to a lab, so that a drill can tell them from other tools.

A drill sees a restart or a change only by its effect (the lab's events), whatever tool made it.
The verbs (`gameday lab restart|stop|start|config`) run in their own process, so each appends
two lines to `<lab state>/drill/lab-verbs.jsonl`: one before it acts (`begin`), one once it is
done (`end`). An action the drill recognises on the same nodes between a verb's begin and a
little after its end (SLACK_S: a lab reports its events late, a Kubernetes watch by whole
seconds) is that verb's. The drill empties the file when it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runner.fsutil import private_dir
from runner.results.drill_record import ActionKind

LOG_FILE = "lab-verbs.jsonl"
FOLDER = "drill"  # the drill's folder in the lab's state (runner.drill.session.DRILL_DIR)
SLACK_S = 5.0
# what each verb's effect is recognised as (a start of a node that was not stopped by a person
# is a restart)
MAKES = {
    "restart": frozenset({ActionKind.RESTART, ActionKind.GROUP_RESTART}),
    "stop": frozenset({ActionKind.STOP}),
    "start": frozenset({ActionKind.START, ActionKind.RESTART}),
    "config": frozenset({ActionKind.CONFIG_CHANGE}),
}


def log_path(state_dir: Path) -> Path:
    return state_dir / FOLDER / LOG_FILE


@dataclass(frozen=True)
class VerbRecord:
    verb: str
    nodes: frozenset[str]
    begin: datetime
    end: datetime | None  # None: still acting (or its process died before it could say)

    def covers(self, kind: ActionKind, nodes: Sequence[str], at: datetime) -> bool:
        """Whether an action of `kind` on `nodes` seen at `at` is this verb's."""
        end = (self.end or at) + timedelta(seconds=SLACK_S)
        made = kind in MAKES.get(self.verb, frozenset())
        return made and set(nodes) <= self.nodes and self.begin <= at <= end


def _append(path: Path, line: dict[str, object]) -> None:
    private_dir(path.parent)  # the drill's folder, owner-only as the drill makes it
    # one write of one short line, opened for append: lines of several verbs never interleave
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


@contextlib.contextmanager
def acting(state_dir: Path, verb: str, nodes: Sequence[str]) -> Iterator[None]:
    """Marks what the block does to `nodes` as the verb's."""
    path = log_path(state_dir)
    rid = uuid.uuid4().hex
    now = datetime.now(UTC).isoformat()
    _append(path, {"id": rid, "verb": verb, "nodes": list(nodes), "begin": now, "pid": os.getpid()})
    try:
        yield
    finally:
        _append(path, {"id": rid, "end": datetime.now(UTC).isoformat()})


def read(state_dir: Path) -> list[VerbRecord]:
    """The verbs logged, oldest first; a line that is not one of ours is passed over."""
    try:
        text = log_path(state_dir).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    begun: dict[str, dict[str, object]] = {}
    ends: dict[str, datetime] = {}
    for line in text.splitlines():
        try:
            d = json.loads(line)
            if "begin" in d:
                begun[str(d["id"])] = d
            elif "end" in d:
                ends[str(d["id"])] = datetime.fromisoformat(str(d["end"]))
        except (ValueError, TypeError, KeyError):
            continue
    out: list[VerbRecord] = []
    for rid, d in begun.items():
        nodes = d.get("nodes")
        try:
            begin = datetime.fromisoformat(str(d["begin"]))
        except ValueError:
            continue
        if isinstance(nodes, list):
            out.append(
                VerbRecord(str(d.get("verb")), frozenset(map(str, nodes)), begin, ends.get(rid))
            )
    return out


def clear(state_dir: Path) -> None:
    log_path(state_dir).unlink(missing_ok=True)


def by_verb(
    records: Sequence[VerbRecord], kind: ActionKind, nodes: Sequence[str], at: datetime
) -> bool:
    """Whether a `gameday lab` verb made an action of `kind` on `nodes` seen at `at`."""
    return any(r.covers(kind, nodes, at) for r in records)
