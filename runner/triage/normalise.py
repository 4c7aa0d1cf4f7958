"""Pasted logs as people paste them, made matchable line by line.

Each original line becomes one `Line`: the text a signature reads (quoting, list markers, a
viewer pane's borders and the prefixes that log collectors put in front taken off; digits
someone masked read as digits) and the line number and text as pasted, which evidence quotes.
Which lines continue the one before (a message wrapped at a terminal's width or by an editor)
is the matcher's business: it reads windows of lines (runner.triage.match), so no guess made
here can lose a line.
"""

from __future__ import annotations

import re
import time
from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

from runner.errors import InputError

# Prefixes that collectors put in front of every line, tried repeatedly in any order (a quoted
# `kubectl logs --prefix --timestamps` carries three). Each names its node where it can.
_RUNTIME_TS = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})(?:\s|$)"
)  # kubectl logs --timestamps, docker logs -t (RFC 3339 with a zone)
# a log viewer's or shipper's own time in front of the program's line (Grafana's and Loki's
# exports, a supervisor's log, a CI console): a date and a time with a space between them. vLLM,
# PyTorch and SGLang begin their lines otherwise (SGLang's time is in brackets). A time followed
# by a separator is the program's own format's (loguru's "time | LEVEL | ...") and stays: the
# separator would read as another prefix (Python logging's whole record is _LOGGING_RECORD)
_COLLECTOR_TS = re.compile(
    r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?: ?(?:Z|UTC|[+-]\d{2}:?\d{2}))?\s+"
    r"(?=\S)(?![|-]\s)"
)
# Python logging's record ("2024-11-14 22:16:37,096 - name - INFO - ", the name optional),
# which a wrapper (a launcher, a notebook, LMDeploy's own logger) writes in front of each line it
# passes on, a traceback's source lines included: what follows is the message patterns read
_LOGGING_RECORD = re.compile(
    r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - (?:[\w.-]+ - )?"
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - ?"
)
_KUBECTL_PREFIX = re.compile(r"^\[pod/(?P<node>[\w.-]+)/[\w.-]+\] ?")  # kubectl logs --prefix
_COMPOSE_PREFIX = re.compile(r"^(?P<node>[a-zA-Z0-9][\w.-]*)\s+\| ?")  # docker compose logs
_JOURNALD_PREFIX = re.compile(
    r"^[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} (?P<node>[\w.-]+) [\w./@-]+(?:\[\d+\])?: "
)  # journalctl's short format: "Nov 30 12:00:01 host vllm[123]: "
# quoting and list markers a chat, a mail or a Markdown file adds
_QUOTE = re.compile(r"^(?:>|&gt;|\|)(?: |$)")
# a list item's marker: a bullet (Markdown's three and the typeset ones) or a number
LIST_ITEM = r"(?:[-*+\u2022\u2192]|\d{1,2}[.)])"
_LIST_MARKER = re.compile(rf"^{LIST_ITEM}\s+")
# a fence line opens or closes a code block (with its info string: ```python); a fence with more
# after it is a one-line code span (```ValueError: ...```), whose text is the log's
_FENCE = re.compile(r"^(?:```|~~~)[\w+.-]*\s*$")
_SPAN_FENCE = re.compile(r"^(?:```|~~~)(?P<body>.*?)(?:```|~~~)?\s*$")
# Markdown's strong emphasis around words a writer highlighted in a pasted line (`**Watchdog
# caught ...:**`); a lone `**` (Python's `**kwargs`) is no emphasis and stays
_EMPHASIS = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
# a number GitHub's renderer linked as an issue or pull request, as a page mirror or a copy of
# the rendered page keeps it: "frame [#1](https://github.com/o/r/issues/1): c10d::..." was the
# program's "frame #1: c10d::..."
_ISSUE_LINK = re.compile(r"\[(#\d+)\]\(https?://[^\s()]+/(?:issues|pull)/\d+\)")
# the start of any of the above: a line that begins with none of them carries none, so it is only
# stripped of its surrounding spaces (most lines of a log)
_MAYBE_PREFIX = re.compile(
    r"```|~~~|>|&gt;|\||\d{4}-\d{2}-\d{2}[T ]|\[pod/|[A-Z][a-z]{2} [ \d]\d \d{2}:"
    rf"|{LIST_ITEM}|[a-zA-Z0-9][\w.-]*\s+\|"
)
# masked digits: a run of x, X, * or # standing where digits stood (an address or a number):
# two or more mask characters, or one beside a dot or colon that separates numbers
_MASK = re.compile(
    r"(?<![A-Za-z_])(?:[xX]{2,}|\*{2,}|#{2,}|(?<=[.:])[xX*#](?=[.:\s]|$)|[xX*#](?=[.:][\dxX*#]))"
    r"(?![A-Za-z_])"
)
_MAYBE_MASK = re.compile(r"[xX*#][xX*#.:]|[.:][xX*#]")  # what every _MASK match holds
# the borders of a terminal viewer's pane around each line (k9s, lazydocker, a tmux or TUI
# pane copied as it shows): a box-drawing bar at the line's start and, after the padding that
# fills the pane, at its end. Box-drawing bars are no log's text; an ASCII `|` (a table, a
# compose prefix, a quote) is left to the prefixes above
_BOX_BARS = "\u2502\u2503\u2551"
_PANE_EDGES = re.compile(f"^[ \\t]*[{_BOX_BARS}] ?|[ \\t]*[{_BOX_BARS}][ \\t]*$")


# What a blog, a wiki, a word processor or a chat client does to pasted text: typographic
# quotes and apostrophes, no-break and thin spaces, invisible joiners and byte-order marks, an
# ellipsis for three dots, dashes for hyphens. An en or em dash before a word where a flag stood
# ("\u2013max-model-len": a smart-punctuation filter made "--" one dash) reads as "--"; any
# other as "-".
_TYPOGRAPHY = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u00b4\uff07", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\uff02", '"'),
        **dict.fromkeys(
            "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
            "\u2009\u200a\u202f\u205f\u3000",
            " ",
        ),
        **dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff\u00ad", None),
        **dict.fromkeys("\u2010\u2011\u2012\u2212\ufe63\uff0d", "-"),
        "\u2026": "...",
    }
)
_FLAG_DASH = re.compile(r"(?:(?<=\s)|^)[\u2013\u2014](?=[a-z])")
_DASH = re.compile(r"[\u2013\u2014]")


def fold_typography(text: str) -> str:
    """`text` with the characters typesetting put in place of a log's ASCII put back."""
    return _DASH.sub("-", _FLAG_DASH.sub("--", text.translate(_TYPOGRAPHY)))


class Line(NamedTuple):
    """One pasted line: `number` is 1-based as an editor shows it; `text` is what signatures
    read; `node` is the node or pod a collector's prefix named. A tuple: a log holds a million of
    them, and a tuple is the smallest and quickest immutable record."""

    number: int
    original: str
    text: str
    node: str | None = None


def unmask(text: str) -> str:
    """Masked digits read as zeros, so `10.100.xxx.xx` is an address to a `[0-9.]+` pattern."""
    if not _MAYBE_MASK.search(text):
        return text
    return _MASK.sub(lambda m: "0" * len(m.group(0)), text)


def _strip_prefixes(text: str) -> tuple[str, str | None]:
    node = None
    for _ in range(8):  # each pass takes off one layer; a line carries at most a few
        before = text
        text = text.strip()
        if _FENCE.match(text):
            return "", node
        span = _SPAN_FENCE.match(text)
        if span is not None:
            text = span.group("body")
        text = _QUOTE.sub("", text, count=1)
        text = _RUNTIME_TS.sub("", text, count=1)
        text = _LOGGING_RECORD.sub("", text, count=1)
        text = _COLLECTOR_TS.sub("", text, count=1)
        for rx in (_KUBECTL_PREFIX, _COMPOSE_PREFIX, _JOURNALD_PREFIX):
            m = rx.match(text)
            if m:
                node = node or m.group("node")
                text = text[m.end() :]
        text = _LIST_MARKER.sub("", text, count=1)
        if text == before:
            break
    return text, node


class BudgetExceeded(InputError):
    """The log is more than triage may read: more lines than its budget, or not read within its
    time. Nothing is concluded from a part of it (exit 2, as for a log over the size limit)."""


# the characters str.splitlines ends a line at (a CR LF pair ends one line)
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def count_lines(text: str) -> int:
    """len(text.splitlines()), without making the lines."""
    breaks = sum(text.count(c) for c in _LINE_BREAKS) - text.count("\r\n")
    return breaks + (1 if text and text[-1] not in _LINE_BREAKS else 0)


@dataclass(frozen=True)
class Deadline:
    """When triage must have finished (time.monotonic()), and the budget it was given."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds, seconds)

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise BudgetExceeded(
                f"triage did not finish within its time budget ({self.seconds:g} s); nothing "
                "is concluded",
                hint="triage the lines around the failure, or give it more time (--timeout)",
            )


class Lines(Sequence[Line]):
    """A log's lines, kept as three columns (pasted text, what signatures read, node) and made a
    `Line` when one is read: a million tuples and their numbers would double what a log of
    short lines holds."""

    def __init__(
        self, originals: Sequence[str], texts: Sequence[str], nodes: Sequence[str | None]
    ) -> None:
        self.originals, self.texts, self.nodes = originals, texts, nodes
        self._starting: dict[re.Pattern[str], list[int]] = {}

    def __len__(self) -> int:
        return len(self.texts)

    @overload
    def __getitem__(self, k: int) -> Line: ...
    @overload
    def __getitem__(self, k: slice) -> list[Line]: ...
    def __getitem__(self, k: int | slice) -> Line | list[Line]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        return Line(k + 1, self.originals[k], self.texts[k], self.nodes[k])

    def __iter__(self) -> Iterator[Line]:
        for k in range(len(self)):
            yield self[k]

    def starting_with(self, rx: re.Pattern[str]) -> list[int]:
        """The indexes of the lines whose pasted text `rx` matches at its start (`rx` in
        multi-line mode, `^` first): one pass over the pasted text where the lines are cut from
        it, not a string per line."""
        if rx in self._starting:
            return self._starting[rx]
        originals = self.originals
        if isinstance(originals, _Pasted):
            at = originals.at
            found = (bisect_right(at, m.start()) - 1 for m in rx.finditer(originals.text))
            self._starting[rx] = sorted({k for k in found if k < len(self)})
        else:
            self._starting[rx] = [k for k, text in enumerate(originals) if rx.match(text)]
        return self._starting[rx]


class LineViews(Sequence[str]):
    """Lines read from one buffer on demand, where `at[k]` is where line k begins and
    `at[k + 1]` where the next one does: a million lines cost two arrays, not a million strings."""

    def __init__(self, at: array[int]) -> None:
        self.at = at

    def __len__(self) -> int:
        return len(self.at) - 1

    def line(self, k: int) -> str:
        raise NotImplementedError

    @overload
    def __getitem__(self, k: int) -> str: ...
    @overload
    def __getitem__(self, k: slice) -> list[str]: ...
    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return [self.line(i) for i in range(*k.indices(len(self)))]
        return self.line(k + len(self) if k < 0 else k)


class _Pasted(LineViews):
    """Each line as pasted, cut from the pasted text when it is read (the text is kept by whoever
    pasted it anyway)."""

    def __init__(self, text: str, at: array[int]) -> None:
        super().__init__(at)
        self.text = text

    def line(self, k: int) -> str:
        nxt = self.at[k + 1]
        return self.text[self.at[k] : nxt - (2 if self.text.startswith("\r\n", nxt - 2) else 1)]


_PIECE = 1 << 20  # characters split into lines at once


def _pieces(text: str) -> Iterator[str]:
    """`text` in pieces of about _PIECE characters, each ending after a newline (or at the end),
    so that their lines are the text's lines, and no list of every line is made at once."""
    start = 0
    while start < len(text):
        cut = text.find("\n", start + _PIECE)
        end = len(text) if cut < 0 else cut + 1
        yield text if (start, end) == (0, len(text)) else text[start:end]
        start = end


def normalise(text: str, deadline: Deadline | None = None) -> Lines:
    plain = text.isascii() and "\t" not in text
    texts: list[str] = []
    nodes: list[str | None] = []
    at = array("q", bytes(8 * (count_lines(text) + 1)))
    add_text, add_node = texts.append, nodes.append
    number, pos, crlf = 0, 0, "\r\n" in text
    for piece in _pieces(text):
        if deadline is not None:
            deadline.check()
        for original in piece.splitlines():
            at[number] = pos
            number += 1
            pos += len(original) + (
                2 if crlf and text.startswith("\r\n", pos + len(original)) else 1
            )
            if plain or (original.isascii() and "\t" not in original):
                body = original  # nothing typeset, no tab: most lines
            else:
                body = fold_typography(original).replace("\t", " ")
                if any(c in body for c in _BOX_BARS):
                    body = _PANE_EDGES.sub("", body)
            stripped = body.strip()
            node = None
            if _MAYBE_PREFIX.match(stripped):
                stripped, node = _strip_prefixes(body)
            if "**" in stripped:
                stripped = _EMPHASIS.sub(r"\1", stripped)
            if "[#" in stripped:
                stripped = _ISSUE_LINK.sub(r"\1", stripped)
            while stripped.endswith("^M"):
                # a carriage return as a pager or an editor shows it (cat -v, less, vim), copied
                # as the two characters: a CRLF file's line end, not text
                stripped = stripped[:-2].rstrip()
            stripped = unmask(stripped)
            add_text(original if stripped == original else stripped)
            add_node(node)
    at[number] = pos
    return Lines(_Pasted(text, at), texts, nodes)
