"""A model's answer whose text is no language, read from a pasted log.

An engine that computes wrong logits (a kernel fault, a quantisation mismatched to its kernel,
one request reading another's cache) still answers 200 and logs nothing; what a user pastes is
the answer. Two shapes of it are read here, since RE2's patterns (runner.spec.patterns) cannot
say them:

- token soup (`mixed_scripts`): sampling from broken logits picks tokens from all over the
  vocabulary, so words of unrelated writing systems (Latin, Cyrillic, Han, Thai, Hebrew...)
  switch word by word. Text written by people keeps to one or two systems for a stretch (a
  Japanese sentence is Han and kana; a list of greetings in six languages switches five times),
  so a stretch of `WINDOW` characters must switch systems at least `SWITCHES` times and come
  back to at least `SCRIPTS` of them;
- one word over and over (`repeated_word`): greedy decoding stuck on one token, at least
  `REPEATS` times in a row. A small model can loop like this by itself, which the finding's
  advice says.

The other shapes are patterns in silent-wrong-output's scenario file: an answer of only "!"
(token 0, the argmax of NaN logits), reserved special tokens, empty content cut at max_tokens.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections import Counter
from functools import cache

from runner.spec.expectations import TextCheck
from runner.triage.match import Evidence, Log

WINDOW = 240  # characters
SCRIPTS = 4
SWITCHES = 10
REPEATS = 6

# an ASCII word of two or more letters, then the same word again and again, within one line (a
# wrapped line's continuation is joined to it with a space in the log's spaced text)
_REPEATED = re.compile(rb"(?<![A-Za-z])([A-Za-z]{2,})(?:[ \t]+\1(?![A-Za-z])){%d,}" % (REPEATS - 1))
_NON_ASCII = re.compile(rb"[\x80-\xff]")

SOUP = "an answer that mixes writing systems token by token (token soup)"
REPEAT = "an answer that repeats one word over and over"


@cache
def script(c: str) -> str | None:
    """The writing system of a letter (None for anything else): Unicode's name for it, with the
    two kana as one and Latin in every width."""
    if not unicodedata.category(c).startswith("L"):
        return None
    words = unicodedata.name(c, "").split()
    if not words:
        return None
    if "LATIN" in words:
        return "Latin"
    if "HIRAGANA" in words or "KATAKANA" in words:
        return "Kana"
    if words[0] == "CJK":
        return "Han"
    return words[0].capitalize()


_NON_ASCII_CHAR = re.compile(r"[^\x00-\x7f]")


def mixed(text: str) -> tuple[int, int] | None:
    """(systems, switches) of the first stretch of `text` that reads as token soup, else None."""
    # most lines with other characters than ASCII hold a progress bar or one language: the
    # systems of the distinct characters rule them out before each character is read
    systems = {script(c) for c in set(_NON_ASCII_CHAR.findall(text))} | {"Latin"}
    if len(systems - {None}) < SCRIPTS:
        return None
    runs: list[tuple[int, str]] = []  # where each run of one system's letters starts
    for i, c in enumerate(text):
        s = script(c)
        if s is not None and (not runs or runs[-1][1] != s):
            runs.append((i, s))
    if len(runs) <= SWITCHES:
        return None
    lo = 0
    for hi in range(len(runs)):
        while runs[hi][0] - runs[lo][0] > WINDOW:
            lo += 1
        if hi - lo >= SWITCHES:
            seen = Counter(s for _, s in runs[lo : hi + 1])
            # a system counts where the stretch comes back to it: a foreign name quoted once
            # in a sentence is not soup
            back = sum(1 for n in seen.values() if n >= 2)
            if back >= SCRIPTS:
                return back, hi - lo
    return None


def _line_at(log: Log, offset: int) -> int:
    return bisect_right(log.spaced_at, offset) - 1


def find_garbled(log: Log, check: TextCheck) -> list[Evidence] | None:
    """The first line that shows `check`'s shape of a broken answer, as evidence."""
    if check is TextCheck.REPEATED_WORD:
        m = _REPEATED.search(log.spaced)
        if m is None:
            return None
        k = _line_at(log, m.start())
        word = m.group(1).decode()
        times = len(m.group(0).split())
        return [Evidence(REPEAT, (log.lines[k],), {"word": word, "times": str(times)})]
    if log.ascii:
        return None
    pos, size = 0, len(log.spaced)
    while (m := _NON_ASCII.search(log.spaced, pos)) is not None:
        k = _line_at(log, m.start())
        line = log.lines[k]
        found = mixed(line.text)
        if found is not None:
            systems, switches = found
            caps = {"systems": str(systems), "switches": str(switches)}
            return [Evidence(SOUP, (line,), caps)]
        pos = log.spaced_at[k + 1] if k + 1 < len(log.spaced_at) else size
        if log.deadline is not None:
            log.deadline.check()
    return None
