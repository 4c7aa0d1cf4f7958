"""The undo journal: every change is written (and fsync'ed) before it is applied, so a run that is
interrupted, even by SIGKILL, can be undone later by `gameday cleanup`.

One JSON-lines file per run under <lab state dir>/journal/. Records:
    {"op": "change", "seq": 3, "run": ..., "scenario": ..., "change": {...}, "ts": ...}
    {"op": "step", "seq": 4, "run": ..., "scenario": ..., "folder": ..., "what": ...,
     "undo": {...} | null, "reason": ..., "mark": ..., "ts": ...}
                                (a user-written step, before it runs: its undo, or null:
                                re-apply the baseline; the mark in a command's environment,
                                by which cleanup finds its processes: runner.run.orphans)
    {"op": "undone", "seq": 3, "ts": ...}
    {"op": "closed", "ts": ...}                      (the run finished its cleanup)
A change with no "undone" record is open; a journal with no "closed" record may have leftovers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic

from runner.errors import LabError
from runner.fsutil import fsync_dir, private_dir
from runner.labs.base import Change
from runner.spec.usersteps import AnyUndoStep, UndoStep

_UNDO_STEP: pydantic.TypeAdapter[AnyUndoStep] = pydantic.TypeAdapter(UndoStep)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _append(path: Path, record: dict[str, object]) -> bool:
    """Append one record and fsync it; whether the file was created. The journal keeps values as
    they were (undo needs them): owner-only. A last line torn by a kill mid-write is ended first,
    or the record would join it and be lost with it."""
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "r+b") as f:
        torn = False
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            torn = f.read(1) != b"\n"
        f.write((("\n" if torn else "") + json.dumps(record) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())
    return created


@dataclass(frozen=True)
class OpenChange:
    journal: Path
    seq: int
    scenario: str
    change: Change


class Journal:
    def __init__(self, lab_state_dir: Path, run_id: str) -> None:
        self.dir = private_dir(lab_state_dir / "journal")
        self.path = self.dir / f"{run_id}.jsonl"
        self.run_id = run_id
        self._seq = 0

    def _write(self, record: dict[str, object]) -> None:
        if _append(self.path, record):  # the file's name, too, must survive a crash for cleanup
            fsync_dir(self.dir)

    def record(self, scenario: str, change: Change) -> int:
        self._seq += 1
        self._write(
            {
                "op": "change",
                "seq": self._seq,
                "run": self.run_id,
                "scenario": scenario,
                "change": change.model_dump(mode="json"),
                "ts": _now(),
            }
        )
        return self._seq

    def record_step(
        self,
        scenario: str,
        folder: Path,
        what: str,
        undo: AnyUndoStep | None,
        reason: str,
        mark: str | None = None,
    ) -> int:
        """A user-written step about to run: its undo (None: cleanup re-applies the lab's
        baseline, for `reason`), the folder it runs in and the mark its processes carry."""
        self._seq += 1
        self._write(
            {
                "op": "step",
                "seq": self._seq,
                "run": self.run_id,
                "scenario": scenario,
                "folder": str(folder.resolve()),
                "what": what,
                "undo": undo.model_dump(mode="json", by_alias=True) if undo else None,
                "reason": reason,
                "mark": mark,
                "ts": _now(),
            }
        )
        return self._seq

    def undone(self, seq: int) -> None:
        self._write({"op": "undone", "seq": seq, "ts": _now()})

    def close(self) -> None:
        self._write({"op": "closed", "ts": _now()})


def open_changes(lab_state_dir: Path) -> list[OpenChange]:
    """Changes not yet undone, newest first (the order to undo them in)."""
    out: list[OpenChange] = []
    jdir = lab_state_dir / "journal"
    if not jdir.is_dir():
        return out
    for path in sorted(jdir.glob("*.jsonl")):
        changes: dict[int, OpenChange] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a record torn by a kill mid-write was never applied
            if rec.get("op") == "change":
                changes[rec["seq"]] = OpenChange(
                    path, rec["seq"], rec.get("scenario", ""), _change(path, rec)
                )
            elif rec.get("op") == "undone":
                changes.pop(rec["seq"], None)
        # a "closed" record says the run finished its cleanup; a change still open after it (its
        # undo failed) is still to be undone, so only the change and undone records count here
        out += sorted(changes.values(), key=lambda c: c.seq, reverse=True)
    return out


def _change(path: Path, rec: dict[str, Any]) -> Change:
    """A journalled change, also as older versions wrote it (states without a `type` tag)."""
    raw = dict(rec.get("change") or {})
    for side in ("before", "after"):
        state = raw.get(side)
        if isinstance(state, dict) and "type" not in state:
            state = dict(state)
            state["type"] = (
                "node_config" if "args" in state else "process" if "running" in state else "value"
            )
            raw[side] = state
    try:
        return Change.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise LabError(
            f"{path}: journal record {rec.get('seq')} cannot be read by this version of gameday "
            f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']})",
            hint="check the lab by hand, then move the journal file out of the way",
        ) from None


@dataclass(frozen=True)
class OpenStep:
    """A user-written step whose undo (or baseline re-apply) has not run."""

    journal: Path
    seq: int
    scenario: str
    folder: Path
    what: str
    undo: AnyUndoStep | None
    reason: str
    mark: str | None = None  # in its processes' environment (runner.run.orphans)


def open_steps(lab_state_dir: Path) -> list[OpenStep]:
    """User-written steps not yet undone, newest first."""
    out: list[OpenStep] = []
    jdir = lab_state_dir / "journal"
    if not jdir.is_dir():
        return out
    for path in sorted(jdir.glob("*.jsonl")):
        steps: dict[int, OpenStep] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("op") == "step":
                steps[rec["seq"]] = _step(path, rec)
            elif rec.get("op") == "undone":
                steps.pop(rec["seq"], None)
        out += sorted(steps.values(), key=lambda c: c.seq, reverse=True)
    return out


def _step(path: Path, rec: dict[str, Any]) -> OpenStep:
    try:
        undo = _UNDO_STEP.validate_python(rec["undo"]) if rec.get("undo") else None
    except pydantic.ValidationError as exc:
        raise LabError(
            f"{path}: journal record {rec.get('seq')} cannot be read by this version of gameday "
            f"({exc.errors()[0]['msg']})",
            hint="check the lab by hand, then move the journal file out of the way",
        ) from None
    return OpenStep(
        path,
        rec["seq"],
        rec.get("scenario", ""),
        Path(rec.get("folder", ".")),
        rec.get("what", ""),
        undo,
        rec.get("reason", ""),
        rec.get("mark") if isinstance(rec.get("mark"), str) else None,
    )


def mark_undone(item: OpenChange | OpenStep) -> None:
    _append(item.journal, {"op": "undone", "seq": item.seq, "ts": _now()})


def close_journals(lab_state_dir: Path) -> None:
    jdir = lab_state_dir / "journal"
    if not jdir.is_dir():
        return
    for path in jdir.glob("*.jsonl"):
        if '"op": "closed"' not in path.read_text(encoding="utf-8"):
            _append(path, {"op": "closed", "ts": _now()})
