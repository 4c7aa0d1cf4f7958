"""Signatures matched on normalised lines, a message wrapped over several lines included.

A pattern is tried on each line alone and, where that fails, on the line joined with the lines
that continue it (up to `MAX_SPAN`; a continuation never starts a new record, comes from the same
node and is not blank), joined both with a space (an editor wraps at a word) and with nothing (a
terminal cuts mid-word). The evidence is the first line where the match starts, with the lines it
needed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from runner.spec.patterns import Regex, compile_user
from runner.spec.signature import MAX_LINE
from runner.triage.normalise import Line

MAX_SPAN = 8  # lines one wrapped message may take

# lines that begin a record of their own, so never continue the line before
_RECORD_START = re.compile(
    r"^(?:\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\w*|\w+) pid=\d+\)"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b"
    r"|\[rank\d+\]|\[[WEIF]\d{4} "
    r"|Traceback \(most recent call last\)|File \""
    r"|\d{4}-\d{2}-\d{2}[ T]\d|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}"
    r"|[\w.]*(?:Error|Exception|Warning|Interrupt|Exit)\b:)"
)


@dataclass(frozen=True)
class Evidence:
    """Where one pattern matched: the pasted lines it took, and its named groups."""

    description: str
    lines: tuple[Line, ...]
    captures: dict[str, str] = field(default_factory=dict)

    @property
    def number(self) -> int:
        return self.lines[0].number

    @property
    def quote(self) -> str:
        return "\n".join(ln.original for ln in self.lines)

    @property
    def text(self) -> str:
        return " ".join(ln.text for ln in self.lines)


def _continues(first: Line, line: Line) -> bool:
    return bool(line.text) and line.node == first.node and not _RECORD_START.match(line.text)


def _search(rx: Regex, lines: Sequence[Line]) -> tuple[str, dict[str, str]] | None:
    """The separator and the groups of the first joining of `lines` the pattern matches, where
    the match needs the first line (the same match without it belongs to a later start)."""
    for sep in (" ", "") if len(lines) > 1 else (" ",):
        m = rx.search(sep.join(ln.text for ln in lines)[:MAX_LINE])
        if not m:
            continue
        if len(lines) > 1 and rx.search(sep.join(ln.text for ln in lines[1:])[:MAX_LINE]):
            continue
        return sep, {k: v for k, v in m.groupdict().items() if v is not None}
    return None


class Log:
    """Normalised lines with what every pattern's search reuses: where each line's possible
    continuation ends, and the whole text joined both ways (a pattern with no anchor that
    matches neither cannot match any window of it)."""

    def __init__(self, lines: Sequence[Line]) -> None:
        self.lines = list(lines)
        self.ends = [self._block_end(i) for i in range(len(self.lines))]
        self.joined = tuple(sep.join(ln.text for ln in self.lines) for sep in (" ", ""))

    def _block_end(self, i: int) -> int:
        end = i + 1
        while (
            end < len(self.lines)
            and end - i < MAX_SPAN
            and _continues(self.lines[i], self.lines[end])
        ):
            end += 1
        return end


def find(
    log: Log | Sequence[Line], regex: str, description: str = "", start: int = 0
) -> tuple[int, Evidence] | None:
    """The first match of `regex` at or after line index `start`: the index after its last line,
    and the evidence."""
    log = log if isinstance(log, Log) else Log(log)
    rx = compile_user(regex)
    anchored = "^" in regex or "$" in regex
    if not anchored and not any(rx.search(text) for text in log.joined):
        return None
    lines = log.lines
    for i in range(start, len(lines)):
        last = log.ends[i]
        if last - i > 1 and not anchored:
            # a joining that does not match holds no shorter one that does
            window = lines[i:last]
            if not any(
                rx.search(sep.join(ln.text for ln in window)[:MAX_LINE]) for sep in (" ", "")
            ):
                continue
        for end in range(i + 1, last + 1):
            hit = _search(rx, lines[i:end])
            if hit is not None:
                return end, Evidence(description or regex, tuple(lines[i:end]), hit[1])
    return None


def find_in_order(
    log: Log | Sequence[Line], patterns: Sequence[tuple[str, str]]
) -> list[Evidence] | None:
    """Every (regex, description) in order, each after the lines of the one before; None when
    one is missing."""
    log = log if isinstance(log, Log) else Log(log)
    pos = 0
    found = []
    for regex, description in patterns:
        hit = find(log, regex, description, pos)
        if hit is None:
            return None
        pos, ev = hit
        found.append(ev)
    return found
