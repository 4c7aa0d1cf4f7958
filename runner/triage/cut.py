"""A paste cut short: the message's start without its end, or a traceback that ends at the line
that raises it.

People paste what fits: a terminal's first screen, a message hard-wrapped and cut after its
first line, a traceback whose last line (the exception and its message) was left out. Such a
paste still names the failure by what is there:

- the message's start: a prefix of the identifying pattern (the pattern cut after one of its
  top-level parts, a group without alternatives cut inside it too) that holds at least
  `MIN_LITERAL` of its literal characters, and matches up to the end of a record: the paste, or
  the message, ends there;
- the raise: the traceback's last frame is a place the pattern says the message is raised in
  (`raised_in`: `vllm/envs.py get_vllm_port`), with its source line and nothing of the
  exception after it.

Each search reads the log once for the shortest acceptable prefix (on RE2, as runner.triage.match
does), and tries the longer ones only on the few records that hold it, by bisection: a prefix
that matches from a place implies its shorter prefixes do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from runner.spec.expectations import Pattern
from runner.spec.patterns import compile_user
from runner.triage.match import Evidence, Log, _finder

MIN_LITERAL = 24  # literal characters a cut message must still show
_QUANT = re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})\??")
_FRAME = re.compile(r'^File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)$')
# what vLLM puts before a traceback's lines: the process (0.19 decorates its streams) and, for
# `logger.exception`, the record's head on each line
_HEAD = re.compile(
    r"^(?:\(\w+ pid=\d+\) )?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ "
    r"\[?[\w.]+:\d+\] )?"
)


def _body(text: str) -> str:
    return _HEAD.sub("", text, count=1).strip()


@dataclass(frozen=True)
class Cut:
    """Where the paste was cut: `how` says which form (`message` or `raise`)."""

    how: str
    evidence: Evidence


def _tokens(pattern: str) -> list[str]:
    """`pattern`'s top-level parts, each with its quantifier: an escape, a class, a group, one
    character."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            j = i + 2
            if pattern[i + 1 : i + 2] in ("p", "P") and pattern[j : j + 1] == "{":
                j = pattern.index("}", j) + 1
        elif c == "[":
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            j += 1
        elif c == "(":
            depth, j = 1, i + 1
            while depth:
                if pattern[j] == "\\":
                    j += 2
                    continue
                if pattern[j] == "[":
                    k = j + 1 + (pattern[j + 1 : j + 2] == "^")
                    k += pattern[k : k + 1] == "]"
                    while pattern[k] != "]":
                        k += 2 if pattern[k] == "\\" else 1
                    j = k + 1
                    continue
                depth += {"(": 1, ")": -1}.get(pattern[j], 0)
                j += 1
        else:
            j = i + 1
        m = _QUANT.match(pattern, j)
        if m:
            j = m.end()
        out.append(pattern[i:j])
        i = j
    return out


def _top_alternatives(tokens: list[str]) -> list[list[str]]:
    alts: list[list[str]] = [[]]
    for t in tokens:
        if t == "|":
            alts.append([])
        else:
            alts[-1].append(t)
    return alts


def _literal(token: str) -> int:
    """The literal characters a part stands for: 1 for a plain or escaped punctuation character
    without quantifier, 0 for anything else (a class, a group, `\\d`, a quantified part)."""
    if token[0] in "[(.^$":
        return 0
    base = token[:2] if token.startswith("\\") else token[:1]
    if token[len(base) :]:
        return 0  # quantified
    return 1 if len(base) == 1 or not base[1].isalnum() else 0


def _prefixes(tokens: list[str]) -> list[str]:
    """Every regex made of the first parts of `tokens`, a group without alternatives or
    quantifier also cut inside (and closed), shortest first; the whole is left out."""
    out: list[str] = []
    for k in range(1, len(tokens)):
        head, part = "".join(tokens[: k - 1]), tokens[k - 1]
        out.append(head + part)
        nxt = tokens[k]
        if nxt.startswith("(") and nxt.endswith(")") and not nxt.startswith("(?:)"):
            opener = re.match(r"\((?:\?P<\w+>|\?:)?", nxt)
            assert opener is not None
            inner = _tokens(nxt[opener.end() : -1])
            if "|" not in inner:
                out += [
                    head + part + opener.group(0) + p + ")"
                    for p in _prefixes(inner)
                    if not p.startswith("(?")
                ]
    return out


@cache
def prefixes(pattern: str) -> tuple[str, ...]:
    """The prefixes of `pattern` a cut message can match, shortest first: each keeps at least
    MIN_LITERAL literal characters and compiles on RE2."""
    out: list[str] = []
    for alt in _top_alternatives(_tokens(pattern)):
        for p in _prefixes(alt):
            if sum(map(_literal, _tokens(p))) < MIN_LITERAL:
                continue
            try:
                compile_user(p)
            except ValueError:
                continue
            out.append(p)
    return tuple(sorted(set(out), key=len))


def _windows(log: Log, i: int) -> tuple[str, str]:
    """Line index i's record from there on, joined as an editor wraps (a space) and as a
    terminal cuts (nothing)."""
    texts = [ln.text for ln in log.lines[i : log.ends[i]]]
    return " ".join(texts), "".join(texts)


def _longest(ps: tuple[str, ...], text: str) -> int | None:
    """The index of the longest prefix in `ps` that matches in `text` (None: not even the
    shortest), by bisection."""
    if not compile_user(ps[0]).search(text):
        return None
    lo, hi = 0, len(ps) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if compile_user(ps[mid]).search(text):
            lo = mid
        else:
            hi = mid - 1
    return lo


def message_start(log: Log, pattern: Pattern, start: int) -> Cut | None:
    """The first record from line index `start` that ends in a start of `pattern`'s message."""
    ps = prefixes(pattern.regex)
    if not ps:
        return None
    for i in log.candidates(_finder(ps[0]), start):
        for k in (i - 1, i) if i > start else (i,):
            for text in _windows(log, k):
                best = _longest(ps, text)
                if best is not None and compile_user(f"(?:{ps[best]})\\s*$").search(text):
                    lines = tuple(log.lines[k : log.ends[k]])
                    return Cut("message", Evidence(pattern.description, lines))
    return None


def at_raise(log: Log, pattern: Pattern, start: int) -> Cut | None:
    """The first traceback from line index `start` whose last frame is one `pattern` names in
    `raised_in`, its source line the traceback's last line."""
    sites = {tuple(s.rsplit(" ", 1)) for s in pattern.raised_in}
    if not sites:
        return None
    finder = _finder(r'File "[^"]+", line \d+, in ')
    n = len(log.lines)
    for i in log.candidates(finder, start, windows=False):
        m = _FRAME.match(_body(log.lines[i].text))
        if m is None or i + 1 >= n:
            continue
        if not any(m["path"].endswith(path) and m["func"] == func for path, func in sites):
            continue
        after = _body(log.lines[i + 2].text) if i + 2 < n else ""
        if after.startswith("File ") or re.match(r"[\w.]*(?:Error|Exception)\b", after):
            continue  # not the last frame, or the exception follows: not cut here
        lines = (log.lines[i], log.lines[i + 1])
        return Cut("raise", Evidence(pattern.description, lines))
    return None


def find_cut(log: Log, pattern: Pattern, start: int, frame_start: int) -> Cut | None:
    """`pattern`'s message cut short, whichever form comes first: its start from line index
    `start`, a traceback ending at its raise from `frame_start` (the frame line comes before
    the source line a pattern before this one may have matched)."""
    found = [
        c for c in (message_start(log, pattern, start), at_raise(log, pattern, frame_start)) if c
    ]
    return min(found, key=lambda c: c.evidence.number, default=None)
