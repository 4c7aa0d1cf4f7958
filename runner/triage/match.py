"""Signatures matched on normalised lines, a message wrapped over several lines included.

A pattern is tried on each line alone and, where that fails, on the line joined with the lines
that continue it (up to `MAX_SPAN`; a continuation never starts a new record, comes from the same
node and is not blank), joined both with a space (an editor wraps at a word) and with nothing (a
terminal cuts mid-word). A paste hard-wrapped at a fixed column does both in one message: a break
mid-word or mid-number, and a break at a space that the paste's trailing spaces took with them.
So the lines joined with nothing are read with every space of the pattern optional (`loose`): a
message broken anywhere reads whole. The evidence is the first line where the match starts, with
the lines it needed.

Trying those windows at every line reads each line dozens of times per pattern, so a log is read
in one pass per pattern instead: its lines are joined once, both ways, into two texts in which
only the lines that start a record begin after a newline, and the pattern without its anchors
(`^`, `$`, `\\b`, ...) is searched there on RE2 (linear in the text), never across a newline. Any
window that matches is a stretch of those texts, so the first such match starts on the line
where the first window can start, or on the line after it (an anchor may need the character
before). Windows are tried only there; where they fail, the search goes on after that line, over
a bounded stretch of lines.

Most of a catalogue's patterns match nowhere in a given log, and each such search still reads the
whole log. So the patterns triage will search are indexed first (`Log.index`): RE2's own
prefilter (FilteredRE2) takes from each pattern the literal strings any match must contain, finds
which of them occur in one pass over each text, and a pattern whose required strings are absent
is not searched at all.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from itertools import accumulate, pairwise
from typing import Any

import re2

from runner.spec.patterns import Regex, compile_user
from runner.spec.signature import MAX_LINE
from runner.triage.normalise import Deadline, Line, Lines, LineViews

MAX_SPAN = 8  # lines one wrapped message may take
STRETCH = 256  # lines a search reads on past a place whose windows did not match
_BLOCK = 8192  # lines encoded at once

# lines that begin a record of their own, so never continue the line before
_RECORD_START = re.compile(
    r"^(?:\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\w*|\w+) pid=\d+\)"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b"
    r"|\[rank\d+\]|\[[WEIF](?:\d{3,4} [\d:.]+)? [\w.-]+:\d+\] "
    r"|Traceback \(most recent call last\)|File \""
    r"|\d{4}-\d{2}-\d{2}[ T]\d|[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}"
    r"|[\w.]*(?:Error|Exception|Warning|Interrupt|Exit)\b:)"
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> bytes:
    """As RE2 reads it (runner.spec.patterns): a lone surrogate is U+FFFD."""
    return _SURROGATE.sub("\ufffd", text).encode()


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


def _search(
    rx: Regex, lines: Sequence[Line], rx_loose: Regex | None = None
) -> tuple[str, dict[str, str]] | None:
    """The separator and the groups of the first joining of `lines` the pattern matches, where
    the match needs the first line (the same match without it belongs to a later start). Lines
    joined with nothing are read by `rx_loose` (the pattern's spaces optional) where given."""
    for sep in (" ", "") if len(lines) > 1 else (" ",):
        r = rx_loose if sep == "" and rx_loose is not None else rx
        m = r.search(sep.join(ln.text for ln in lines)[:MAX_LINE])
        if not m:
            continue
        if len(lines) > 1 and r.search(sep.join(ln.text for ln in lines[1:])[:MAX_LINE]):
            continue
        return sep, {k: v for k, v in m.groupdict().items() if v is not None}
    return None


def _tokens(pattern: str) -> Iterator[tuple[str, int, bool]]:
    """`pattern`'s tokens in order, each with where it ends and whether it stands outside a
    character class: an escape (`\\Q...\\E` and `\\p{...}` whole), a POSIX class, a class's
    opening (with its `^` and a literal `]` first), or one character."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        outside = not in_class
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            end = i + 2
            if nxt == "Q":  # \Q...\E quotes literally
                e = pattern.find("\\E", i + 2)
                end = n if e < 0 else e + 2
            elif nxt in ("p", "P", "x") and pattern[i + 2 : i + 3] == "{":
                e = pattern.find("}", i + 3)
                end = n if e < 0 else e + 1
        elif in_class and c == "[" and pattern[i + 1 : i + 2] == ":" and pattern.find(":]", i) > 0:
            end = pattern.find(":]", i) + 2
        elif in_class:
            in_class = c != "]"
            end = i + 1
        elif c == "[":
            end = i + 1 + (pattern[i + 1 : i + 2] == "^")
            end += pattern[end : end + 1] == "]"  # a `]` first in a class is a character
            in_class = True
        else:
            end = i + 1
        yield pattern[i:end], end, outside
        i = end


# a regex quantifier, greedy or lazy: what a token may carry after it
QUANTIFIER = re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})\??")


def unanchored(pattern: str) -> str:
    """`pattern` without its zero-width assertions (`^`, `$`, `\\A`, `\\z`, `\\b`, `\\B`) outside
    character classes: it matches wherever `pattern` matches, whatever the text around."""
    out = []
    for tok, end, outside in _tokens(pattern):
        if outside and tok in ("^", "$", "\\b", "\\B", "\\A", "\\z"):
            # an empty group where a quantifier follows, which would otherwise take what is before
            out.append("(?:)" if QUANTIFIER.match(pattern, end) else "")
        else:
            out.append(tok)
    return "".join(out)


def loose(pattern: str) -> str:
    """`pattern` with each of its spaces optional outside character classes (a literal space, an
    escaped one or `\\s`, repeated or not): it matches what `pattern` matches with any of those
    spaces gone, as a hard-wrapped line joined to its continuation loses the space it broke at."""
    out: list[str] = []
    skip_to = 0
    for tok, end, outside in _tokens(pattern):
        if end <= skip_to:  # a space's quantifier, rewritten with it
            continue
        out.append(tok)
        if outside and tok in (" ", "\\ ", "\\s"):
            m = QUANTIFIER.match(pattern, end)
            quant = m.group(0) if m else ""
            lazy = "?" if len(quant) > 1 and quant.endswith("?") else ""
            # none, one or more of them: whatever the count was, none is allowed
            out.append("?" if not quant else quant if quant[0] in "*?" else "*" + lazy)
            skip_to = end + len(quant)
    return "".join(out)


def _options() -> Any:
    opts = re2.Options()
    opts.log_errors = False
    opts.never_nl = True  # a match never runs from one record into the next
    opts.never_capture = True
    return opts


_OPTIONS = _options()


def _finder(pattern: str) -> Any | None:
    """The unanchored pattern on RE2 for the one-pass search, or None where RE2 refuses it (then
    every line is tried)."""
    try:
        return re2.compile(unanchored(pattern), _OPTIONS)
    except re2.error:
        return None


class _Texts(LineViews):
    """Each line's text, read back from the spaced UTF-8 (a lone surrogate reads as U+FFFD, as
    RE2 reads it anyway)."""

    def __init__(self, data: bytearray, at: array[int]) -> None:
        super().__init__(at)
        self.data = data

    def line(self, k: int) -> str:
        return self.data[self.at[k] : self.at[k + 1] - 1].decode()


class Log:
    """Normalised lines with what every pattern's search reuses: where each line's possible
    continuation ends, and the lines joined both ways (as UTF-8, with each line's offset)."""

    def __init__(self, lines: Sequence[Line], deadline: Deadline | None = None) -> None:
        if not isinstance(lines, Lines):
            lines = Lines(
                [ln.original for ln in lines], [ln.text for ln in lines], [ln.node for ln in lines]
            )
        self.lines = lines
        self.deadline = deadline
        n = len(lines)
        texts, nodes = lines.texts, lines.nodes
        # 1 where a line cannot continue the one before: blank, another node's (than the last
        # line a collector's prefix named), a record's start. A line without a prefix continues
        # one with it: a paste wrapped at a fixed column after the prefix was written carries it
        # on the first line only
        starts = bytearray(n)
        match = _RECORD_START.match
        last: str | None = None
        for k in range(n):
            t, node = texts[k], nodes[k]
            other = node is not None and node != last
            starts[k] = not k or not t or other or match(t) is not None
            if node is not None:
                last = node
        self._check()
        # the end of each line's longest window: MAX_SPAN lines, or the next record's start
        ends = array("l", range(MAX_SPAN, n + MAX_SPAN))
        nxt = n
        for k in range(n - 1, -1, -1):
            if nxt < ends[k]:
                ends[k] = nxt
            if starts[k]:
                nxt = k
        self.ends = ends
        # the lines of each record joined by a space ("spaced") and by nothing ("joined"), the
        # records by newlines, as UTF-8; *_at[k] is where line k begins in each. Both are
        # written in place a block of lines at a time, so that no copy of the whole log is made
        self.ascii = all(map(str.isascii, texts))
        encode: Callable[[str], bytes] = str.encode if self.ascii else _utf8
        sizes = array("q", map(len, texts) if self.ascii else (len(_utf8(t)) for t in texts))
        self.spaced_at = array("q", accumulate(sizes, lambda a, b: a + b + 1, initial=0))
        self.joined_at = array(
            "q",
            accumulate(
                zip(sizes, starts[1:], strict=False), lambda a, b: a + b[0] + b[1], initial=0
            ),
        )
        joined_size = self.joined_at[-1] + sizes[-1] if n else 0
        self.joined_at.append(joined_size + 1)
        spaced, joined = bytearray(max(self.spaced_at[-1] - 1, 0)), bytearray(joined_size)
        for c in range(0, n, _BLOCK):
            d = min(n, c + _BLOCK)
            block = texts[c:d]
            chunk = encode("\n".join(block))
            at = self.spaced_at[c]
            spaced[at : at + len(chunk)] = chunk
            for k in range(c + 1, min(d + 1, n)):  # a continuation follows a space
                if not starts[k]:
                    spaced[self.spaced_at[k] - 1] = 0x20
            cuts = [k for k in range(c + 1, d) if starts[k]]
            chunk = encode(
                "\n".join("".join(block[i - c : j - c]) for i, j in pairwise([c, *cuts, d]))
            )
            at = self.joined_at[c]
            joined[at : at + len(chunk)] = chunk
            if d < n and starts[d]:  # the next block starts a record
                spaced[self.spaced_at[d] - 1] = joined[self.joined_at[d] - 1] = 0x0A
            self._check()
        self.spaced, self.joined = spaced, joined
        # the texts are in the spaced text now: each is read back from it when a line is made
        lines.texts = _Texts(self.spaced, self.spaced_at)
        self._possible: dict[str, bool] = {}
        self._check()

    def index(self, regexes: Iterable[str]) -> None:
        """Find out at once which of `regexes` can match anywhere in this log, as `find` reads it:
        unanchored in the spaced text, or with its spaces optional (`loose`) in the joined one.
        A regex not indexed (or one RE2's prefilter refuses) is always searched."""
        for regex, possible in _prefilter(tuple(sorted(set(regexes))), self).items():
            self._possible[regex] = possible
        self._check()

    def may_match(self, regex: str) -> bool:
        """False only where `regex` was indexed and cannot match anywhere in this log."""
        return self._possible.get(regex, True)

    def _check(self) -> None:
        if self.deadline is not None:
            self.deadline.check()

    def candidates(
        self,
        finder: Any | None,
        start: int,
        windows: bool = True,
        joined_finder: Any | None = None,
    ) -> Iterator[int]:
        """In increasing order from `start`, lines where the unanchored search (`finder`, and
        `joined_finder` in the joined text where given) finds a match beginning; no window
        starting before a yielded line's predecessor, nor between two yielded lines, can match.
        Every line where there is no finder. Without `windows` (a pattern for one line alone)
        the spaced text, which holds every line, is enough."""
        n = len(self.lines)
        if finder is None:
            for k in range(start, n):
                if not k & 0xFF:
                    self._check()
                yield k
            return
        pos, stretch = start, n
        while pos < n:
            self._check()
            hi = min(n, pos + stretch)
            upto = min(n, hi + MAX_SPAN - 1)
            best = n
            ways = (
                (finder, self.spaced, self.spaced_at),
                (joined_finder or finder, self.joined, self.joined_at),
            )
            for f, data, at in ways if windows else ways[:1]:
                m = f.search(data, at[pos], min(at[upto], len(data)))
                if m is not None:
                    best = min(best, bisect_right(at, m.start(), pos, upto) - 1)
            if best > hi or best == n:  # no window starts in [pos, hi): each ends before upto
                pos = hi
                continue
            yield best
            pos, stretch = best + 1, STRETCH

    def first(self, rx: re.Pattern[str]) -> tuple[int, re.Match[str]] | None:
        """The first line `rx` matches alone (a line, not a window), and the match."""
        finder = None
        if self.ascii and not rx.flags & ~re.UNICODE:
            finder = _finder(rx.pattern)
        for k in self.candidates(finder, 0, windows=False):
            m = rx.search(self.lines[k].text)
            if m:
                return k, m
        return None


@lru_cache(maxsize=8)
def _filters(regexes: tuple[str, ...]) -> tuple[tuple[str, ...], Any, Any]:
    """The regexes RE2's prefilter takes (in the order it numbers them), and its filters for the
    spaced text (each regex unanchored) and the joined text (each also `loose`); none where RE2
    cannot build the filters (then every regex is searched)."""
    spaced, joined, taken = re2.Filter(), re2.Filter(), []
    for regex in regexes:
        pair = unanchored(regex), unanchored(loose(regex))
        try:
            for pattern in pair:  # one refused by either filter would misnumber the other
                re2.compile(pattern, _OPTIONS)
        except re2.error:
            continue  # not indexed: searched as every line is tried (runner.triage.match.find)
        spaced.Add(pair[0], _OPTIONS)
        joined.Add(pair[1], _OPTIONS)
        taken.append(regex)
    try:
        if taken:
            spaced.Compile()
            joined.Compile()
    except re2.error:  # its set of required strings past RE2's memory budget
        return (), None, None
    return tuple(taken), spaced, joined


def _prefilter(regexes: tuple[str, ...], log: Log) -> dict[str, bool]:
    """Whether each of `regexes` can match `log` (regexes the prefilter refuses are left out):
    one pass of RE2's set of required strings over each of the log's two texts. Its answer is
    "possibly" where every required string of some way to match occurs, never "no" where a
    match exists; a regex with no required string of three characters or more is always
    possible. (The set's search cannot give up part way on a long text: RE2 lets only a
    single regex's DFA bail out when its cache keeps filling, never a set's, which resets the
    cache and goes on.)"""
    taken, spaced, joined = _filters(regexes)
    if not taken:
        return {}
    possible = set(spaced.Match(log.spaced, potential=True) or ())
    possible |= set(joined.Match(log.joined, potential=True) or ())
    return {regex: k in possible for k, regex in enumerate(taken)}


def _window(
    log: Log, rx: Regex, rx_loose: Regex, i: int, anchored: bool, description: str
) -> tuple[int, Evidence] | None:
    """The shortest window of lines from line index `i` that the pattern matches, needing `i`:
    `rx` reads the lines joined by a space, `rx_loose` (its spaces optional) joined by nothing."""
    lines = log.lines
    last = log.ends[i]
    if last - i > 1 and not anchored:
        # a joining that does not match holds no shorter one that does
        window = lines[i:last]
        if not any(
            r.search(sep.join(ln.text for ln in window)[:MAX_LINE])
            for r, sep in ((rx, " "), (rx_loose, ""))
        ):
            return None
    for end in range(i + 1, last + 1):
        hit = _search(rx, lines[i:end], rx_loose)
        if hit is not None:
            return end, Evidence(description, tuple(lines[i:end]), hit[1])
    return None


@cache
def _compiled_loose(regex: str) -> Regex:
    """`regex` with its spaces optional (`loose`), or as it is where that does not compile."""
    try:
        return compile_user(loose(regex))
    except ValueError:
        return compile_user(regex)


def find(
    log: Log | Sequence[Line],
    regex: str,
    description: str = "",
    start: int = 0,
    accept: Callable[[dict[str, str]], bool] | None = None,
) -> tuple[int, Evidence] | None:
    """The first match of `regex` at or after line index `start` whose captures `accept` takes
    (a scenario's capture checks): the index after its last line, and the evidence."""
    log = log if isinstance(log, Log) else Log(log)
    if not log.may_match(regex):
        return None
    rx, rx_loose = compile_user(regex), _compiled_loose(regex)
    anchored = "^" in regex or "$" in regex
    tried = start - 1
    finder, joined_finder = _finder(regex), _finder(loose(regex))
    if finder is None or joined_finder is None:
        finder = joined_finder = None  # every line is tried
    for c in log.candidates(finder, start, joined_finder=joined_finder):
        for i in range(max(c - 1, tried + 1), c + 1):
            hit = _window(log, rx, rx_loose, i, anchored, description or regex)
            if hit is not None and (accept is None or accept(hit[1].captures)):
                return hit
        tried = c
    return None


def find_in_order(
    log: Log | Sequence[Line],
    patterns: Sequence[tuple[str, str]],
    start: int = 0,
    accepts: Sequence[Callable[[dict[str, str]], bool] | None] = (),
) -> list[Evidence] | None:
    """Every (regex, description) in order from line index `start`, each after the lines of the
    one before and, where `accepts` gives a check for it, with captures the check takes; None
    when one is missing."""
    log = log if isinstance(log, Log) else Log(log)
    pos = start
    found = []
    for k, (regex, description) in enumerate(patterns):
        hit = find(log, regex, description, pos, accepts[k] if k < len(accepts) else None)
        if hit is None:
            return None
        pos, ev = hit
        found.append(ev)
    return found
