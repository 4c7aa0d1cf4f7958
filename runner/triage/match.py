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

from runner.patterns import Regex, compile_user
from runner.signature import MAX_LINE
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


def find(
    lines: Sequence[Line], regex: str, description: str = "", start: int = 0
) -> tuple[int, Evidence] | None:
    """The first match of `regex` at or after index `start`: the index after its last line, and
    the evidence."""
    rx = compile_user(regex)
    for i in range(start, len(lines)):
        end = i + 1
        while True:
            hit = _search(rx, lines[i:end])
            if hit is not None:
                _, caps = hit
                return end, Evidence(description or regex, tuple(lines[i:end]), caps)
            if end >= len(lines) or end - i >= MAX_SPAN or not _continues(lines[i], lines[end]):
                break
            end += 1
    return None


def find_in_order(
    lines: Sequence[Line], patterns: Sequence[tuple[str, str]]
) -> list[Evidence] | None:
    """Every (regex, description) in order, each after the lines of the one before; None when
    one is missing."""
    pos = 0
    found = []
    for regex, description in patterns:
        hit = find(lines, regex, description, pos)
        if hit is None:
            return None
        pos, ev = hit
        found.append(ev)
    return found
