"""A paste cut short: the message's start without its end, or a traceback that ends at the line
that raises it.

People paste what fits: a terminal's first screen, a message hard-wrapped and cut after its
first line, a traceback whose last line (the exception and its message) was left out. Such a
paste still names the failure by what is there:

- the message's start: the identifying pattern cut after any of its parts (a group without
  alternatives or quantifier opened up, so that it can be cut inside), keeping at least
  `MIN_LITERAL` of its literal characters, matching up to the end of a record: the paste, or
  the message, ends there, or only what closes a shortened quote follows (`...`, a backtick,
  quotes, a full stop, a table cell's `|`, a pager's `>` where it chopped the line); or an
  ellipsis follows it and more text after that, the writer leaving the message's middle out and
  going on with its end or their own words; or it stands inside a quotation that closes
  before its end, the writer's words going on (a message quoted in part in prose, the
  exception's name before it or not);
- the raise: the traceback's last frame is a place the pattern says the message is raised in
  (`raised_in`: `vllm/envs.py get_vllm_port`), with its source line and nothing of the
  exception after it; or the frame before it, whose source line calls such a place when that
  is a check (`check_enough_kv_cache_memory(...)`: a function there to raise the message).

Each form reads the log once on RE2 (as runner.triage.match does): for the shortest start the
message can have, or for a traceback's frame line; only the few records found are tried further,
the message's every start at once, as one regex of nested optional parts (`a(?:b(?:c)?)?$`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import Any

import re2

from runner.spec.expectations import Pattern
from runner.spec.patterns import compile_user
from runner.triage.match import _OPTIONS, QUANTIFIER, Evidence, Log, _finder, loose
from runner.triage.normalise import LIST_ITEM

MIN_LITERAL = 24  # literal characters a cut message must still show
# what a writer closes a shortened message with before the record ends: an ellipsis, the end of
# an inline code span, a quotation, emphasis or parenthesis, a full stop, a Markdown table cell;
# or a pager's mark for a line it chopped at the screen's edge (less's `>`, as journalctl and
# git page their output; systemctl's ellipsis, which normalise folds to `...`)
_CLOSERS = r"(?:\s*(?:\.\.\.|[`'\"*_)\].,;:|>]))*"
# or an ellipsis where the writer left out the rest of the message's words and kept its end or
# their own (`Failed to modify QP to RTR ... Connection timed out [110]`). Read only for a start
# that a program wrote, not a writer: one with an acronym, a digit or an identifier's or a
# record's punctuation in it ("QP to RTR"); a start of plain words ("Some requests timed out")
# followed by an ellipsis is prose as often as a message
_ELIDED = r"\s*\.\.\.\s+\S"
_PROGRAMS_WORDS = re.compile(r"[A-Z]{2}|[\d_:()\[\]{}=/<>]")
# or the message quoted in part inside prose, a quotation opened right before its start and closed
# after it (`the server said "The model's max seq len (8192) is larger than ..." and`); an
# apostrophe closes only before a non-letter, as one inside a word ("model's") is not a quote
_QUOTE_OPEN = "[\"`\u201c\u300c\u300e']"
_QUOTE_CLOSE = "\\s*(?:[\"`\u201d\u300d\u300f]|'(?:\\W|$))"
# the exception's name the message was raised with, which a writer quotes with it
# (`ValueError: LoRA rank 16 is greater than ...`)
_RAISED = r"(?:[\w.]*(?:Error|Exception): )?"
# a function whose job is to raise the message when its condition fails: a call into it that a
# traceback ends at is that check failing, whatever line inside it the paste left out
_CHECK = re.compile(r"^_?(?:check|raise_if|validate|ensure|verify)_")
# a Markdown list item or heading at a line's start, inside quoting or not
_BLOCK_START = re.compile(rf"(?m)^[ \t]*(?:(?:>|&gt;)[ \t]*)*(?:{LIST_ITEM}|#{{1,6}})[ \t]")
MAX_BLOCKS = 4096  # list items and headings a log may have and still be read as a note
# a traceback's frame line, whose function name ends it: cut before it, it names no frame
_FRAME_LINE = '", line '
_CARETS = re.compile(r"^[\s^~]*\^[\s^~]*$")
_EXCEPTION = re.compile(r"[\w.]*(?:Error|Exception|Interrupt|Exit)\b")
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
        m = QUANTIFIER.match(pattern, j)
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


def _either(regexes: list[str]) -> str:
    """One regex that matches where any of `regexes` does."""
    return "|".join(f"(?:{r})" for r in regexes)


def _literal_text(parts: list[str]) -> str:
    """The characters the literal parts among `parts` stand for, in order."""
    return "".join(p[-1] for p in parts if _literal(p))


_OPENER = re.compile(r"\((?:\?P<\w+>|\?:)?")
# a part that is at least one space: a literal one, `\s`, or a class of spaces, once or more
_SPACE = re.compile(r"(?: |\\s|\[ [^\]]*\]|\[\\s[^\]]*\])(?:\+|\{[1-9]\d*(?:,\d*)?\})?")


def _flat(tokens: list[str]) -> list[str]:
    """`tokens` with every group that has neither quantifier nor alternatives opened up into its
    parts (a message can be cut inside it), the others made non-capturing (a cut regex needs no
    names, and one name may not stand twice)."""
    out: list[str] = []
    for t in tokens:
        if not t.startswith("("):
            out.append(t)
            continue
        opener = _OPENER.match(t)
        assert opener is not None
        close = t.rindex(")")
        body = t[opener.end() : close]
        if body.startswith("?"):  # a construct of its own, such as a flags group
            out.append(t)
            continue
        inner = _tokens(body)
        if t.endswith(")") and "|" not in inner:
            out += _flat(inner)
        else:
            out.append("(?:" + t[opener.end() :])
    return out


def _partial(token: str) -> str | None:
    """What a message cut inside a group of alternatives shows of it: a start of any of them
    (a quoted id cut half way: `'request_id': 'cmp`), or None for any other part (a literal,
    a class, or a repeated group, which the parts around it already cut before or after)."""
    opener = _OPENER.match(token)
    if opener is None or token[opener.end() : opener.end() + 1] == "?":
        return None
    close = token.rindex(")")
    if token[close + 1 :] not in ("", "?"):
        return None
    alts = _top_alternatives(_tokens(token[opener.end() : close]))
    if len(alts) < 2:
        return None
    return "(?:" + "|".join(_nested(_flat(alt)) for alt in alts) + ")"


def _nested(parts: list[str]) -> str:
    """Each part optional after the one before it, `a(?:b(?:c)?)?`, a group of alternatives
    also cut inside (_partial)."""
    out = ""
    for part in reversed(parts):
        inside = _partial(part)
        out = f"(?:{part}{out}|{inside})?" if inside else f"(?:{part}{out})?"
    return out


@cache
def cut_pattern(pattern: str) -> tuple[str, str] | None:
    """(the regex a cut message matches, its shortest start) for `pattern`, or None where too
    little of it is literal: a start of the message with at least MIN_LITERAL of its literal
    characters, and not the whole, up to the end of the text."""
    forms = _cut_forms(pattern)
    if forms is None:
        return None
    unquoted, quoted, start = forms
    return (f"{unquoted}|{quoted}" if quoted else unquoted), start


@cache
def _cut_forms(pattern: str) -> tuple[str, str | None, str] | None:
    """`cut_pattern`'s regex in its two forms, the message's start at a record's end and (where
    the start holds a space) the message quoted in part, and its shortest start. The lines
    joined with nothing are read for the first form only: every space is optional there, and a
    quoted name would pass for quoted words."""
    alts = []
    elided = []
    quoted = []
    starts = []
    for alt in _top_alternatives(_tokens(pattern)):
        parts = _flat(alt)
        if _FRAME_LINE in _literal_text(parts):
            continue  # a traceback's frame: its function is what it says, never cut off
        seen, k = 0, 0
        while k < len(parts) and seen < MIN_LITERAL:
            seen += _literal(parts[k])
            k += 1
        if seen < MIN_LITERAL or k >= len(parts):
            continue
        start = "".join(parts[:k])
        alts.append(start + _nested(parts[k:-1]))
        starts.append(start)
        if _PROGRAMS_WORDS.search(_literal_text(parts[:k])):
            elided.append(alts[-1])
        # quoted in prose, a message shows words: a quoted value with no space in it (a JSON
        # log's "target":"text_generation_launcher") is a name, not a message cut short
        q = k
        while q < len(parts) and not any(_SPACE.fullmatch(p) for p in parts[:q]):
            q += 1
        if q < len(parts):
            quoted.append("".join(parts[:q]) + _nested(parts[q:-1]))
    if not alts:
        return None
    unquoted = f"(?:{_either(alts)}){_CLOSERS}\\s*$"
    if elided:
        unquoted = f"(?:{unquoted}|(?:{_either(elided)}){_ELIDED})"
    quote = f"{_QUOTE_OPEN}\\s*{_RAISED}(?:{_either(quoted)}){_QUOTE_CLOSE}" if quoted else None
    try:
        compile_user(f"{unquoted}|{quote}" if quote else unquoted)
    except ValueError:
        return None
    return unquoted, quote, _either(starts)


@cache
def _record_end_finder(regex: str) -> Any | None:
    """`regex` on RE2 with `$` at the end of each record of a Log's joined texts (records are
    lines there, a message's wrapped lines joined within one)."""
    try:
        return re2.compile("(?m)" + regex, _OPTIONS)
    except re2.error:
        return None


def message_start(log: Log, pattern: Pattern, start: int) -> Cut | None:
    """The first record from line index `start` that ends in a start of `pattern`'s message:
    one RE2 pass over each of the log's joined texts."""
    cut = cut_pattern(pattern.regex)
    finder = _record_end_finder(cut[0]) if cut else None
    # the lines joined with nothing lose the spaces a hard wrap broke at (runner.triage.match)
    forms = _cut_forms(pattern.regex)
    joined_finder = _record_end_finder(loose(forms[0])) if forms else None
    if cut is None or finder is None or joined_finder is None or start >= len(log.lines):
        return None
    if not log.may_match(cut[0]):
        return None
    first: int | None = None
    ways = ((finder, log.spaced, log.spaced_at), (joined_finder, log.joined, log.joined_at))
    for f, data, at in ways:
        m = f.search(data, at[start], len(data))
        if m is not None:
            k = bisect_right(at, m.start(), start, len(log.lines)) - 1
            first = k if first is None else min(first, k)
    # a note titled or listed with the message's start: a heading or list item that ends in it,
    # the writer's next heading or item on the line after. The record runs on through that
    # line, so only the title's own text can show the cut. A note has a few such items; a log
    # with more (a shell's trace of thousands of "+ " lines) is no note, and is not read so
    upto = len(log.lines) if first is None else first
    blocks = log.lines.starting_with(_BLOCK_START)
    if len(blocks) <= MAX_BLOCKS:
        for k, after in pairwise(blocks):
            if k < start or after != k + 1 or log.ends[k] <= after:
                continue
            if k >= upto:
                break
            if finder.search(log.lines[k].text) is not None:
                first = k
                break
    if first is None:
        return None
    lines = tuple(log.lines[first : log.ends[first]])
    return Cut("message", Evidence(pattern.description, lines))


def _calls(path: str, source: str, checks: dict[str, frozenset[str]]) -> bool:
    """`source`, a frame's source line in the file `path`, calls one of `checks` (a check's
    name, the packages it is named in): from within the same package, since another library's
    function of that name is another check."""
    return any(
        re.search(rf"(?<!\w){re.escape(func)}\(", source)
        and any(f"/{pkg}/" in f"/{path}" for pkg in pkgs)
        for func, pkgs in checks.items()
    )


def at_raise(log: Log, pattern: Pattern, start: int) -> Cut | None:
    """The first traceback from line index `start` whose last frame is one `pattern` names in
    `raised_in`, its source line the traceback's last line; or whose last frame's source line
    calls a check `raised_in` names (`check_...`, `_check_...`, `raise_if_...`, `validate_...`,
    `ensure_...`, `verify_...`: a function there to raise that message), the frame inside it left
    out."""
    sites = {tuple(s.rsplit(" ", 1)) for s in pattern.raised_in}
    if not sites:
        return None
    checks: dict[str, frozenset[str]] = {}
    for path, func in sites:
        if _CHECK.match(func):
            checks[func] = checks.get(func, frozenset()) | {path.split("/", 1)[0]}
    finder = _finder(r'File "[^"]+", line \d+, in ')
    n = len(log.lines)
    for i in log.candidates(finder, start, windows=False):
        m = _FRAME.match(_body(log.lines[i].text))
        if m is None or i + 1 >= n:
            continue
        raises = any(m["path"].endswith(path) and m["func"] == func for path, func in sites)
        if not raises and not _calls(m["path"], _body(log.lines[i + 1].text), checks):
            continue
        j = i + 2  # past the carets Python 3.11 on puts under the source line
        while j < n and _CARETS.match(_body(log.lines[j].text)):
            j += 1
        after = _body(log.lines[j].text) if j < n else ""
        if after.startswith("File ") or _EXCEPTION.match(after):
            continue  # not the last frame, or the exception follows: not cut here
        lines = (log.lines[i], log.lines[i + 1])
        return Cut("raise" if raises else "call", Evidence(pattern.description, lines))
    return None


def find_cut(log: Log, pattern: Pattern, start: int, frame_start: int) -> Cut | None:
    """`pattern`'s message cut short, whichever form comes first: its start from line index
    `start`, a traceback ending at its raise from `frame_start` (the frame line comes before
    the source line a pattern before this one may have matched)."""
    found = [
        c for c in (message_start(log, pattern, start), at_raise(log, pattern, frame_start)) if c
    ]
    return min(found, key=lambda c: c.evidence.number, default=None)
