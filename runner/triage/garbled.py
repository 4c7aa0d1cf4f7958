"""A model's answer whose text is no language, read from a pasted log.

An engine that computes wrong logits (a kernel fault, a quantisation mismatched to its kernel,
one request reading another's cache) still answers 200 and logs nothing; what a user pastes is
the answer. Two shapes of it are read here, since RE2's patterns (runner.spec.patterns) cannot
say them:

- token soup (`mixed_scripts`): sampling from broken logits picks tokens from all over the
  vocabulary, so words of unrelated writing systems (Latin, Cyrillic, Thai, Hebrew, CJK...)
  switch word by word. Text written by people keeps to one or two systems for a stretch (Japanese
  mixes Han and kana, which count as one CJK system with Hangul; a list of greetings in six
  languages switches five times), so a stretch of `WINDOW` characters of one line must switch
  systems at least `SWITCHES` times and come back to at least `SCRIPTS` of them. Tokens also glue
  systems together inside a word ("amongсилання", "ยายvisão"), which people's text does not,
  except beside Han, kana or Hangul, written without spaces ("使用vLLM部署", "俄语Привет"), and
  Greek, a symbol in formulas and units ("ΔT", "10μs"): a stretch with `GLUED` such switches
  between other systems needs only `SCRIPTS` - 1 systems. A vocabulary of mostly Chinese pieces
  gives soup led by Han, Latin pieces glued in on both sides word after word ("笑容怂azel拒"),
  with Cyrillic or Thai glued to the Latin ("ракaxy"): a stretch with `CJK_GLUINGS` gluings of
  Han, kana or Hangul to Latin and `CJK_LED_GLUED` between other systems, one of them a letter
  of that other system with Latin straight after it, needs `SCRIPTS` - 1 systems too. Chinese
  text glues Latin terms to Han, and Russian writers glue their endings onto Latin terms
  ("GPUшке", "vLLMом"), but neither writes Latin straight after a Cyrillic or Thai letter. A
  vocabulary of mostly Latin word pieces gives soup that is mostly Latin, with Han, kana or
  Hangul pieces glued onto Latin words ("Various草肉", "acheter逐渐") and a letter of another
  system here and there: `GLUED` words within 2 x `WINDOW` characters, each with such a gluing
  inside it, in a stretch `LATIN_LED` Latin or more with a system besides Latin, CJK and Greek,
  is soup too (Chinese glues Latin terms into one phrase, "用vLLM部署Qwen模型", which is one
  word; soup glues CJK pieces into word after word of English). Only letters of
  the systems in `_SYSTEMS` count: marks, symbols and letters Unicode files elsewhere (the
  prolonged-sound mark, modifier letters) are no system;
- one lowercase word over and over (`repeated_word`): greedy decoding stuck on one token, at
  least `REPEATS` times in a row within one line. Capitalised words, two-letter hex bytes and a
  repeat spread over lines are not read: a matrix's headers (`NODE NODE`), a dump of a device's
  memory (`ff ff`), `True True`, a shell loop printing one word per line. A small model can
  loop like this by itself, which the finding's note says. A token without a space of its own
  loops glued to itself ("metryryryryry", "-SIP-SIP-SIP"): a unit of two to six letters (a
  hyphen among them allowed) of at least two different characters, `GLUED_REPEATS` times in a
  row; identifiers, words and base64 do not repeat a unit so, and one character over and over
  (`AAAA`, `xxxx`, a rule of `----`) is not read. A loop of a phrase ("I think. I think.",
  "lot pet dealer lot pet dealer") is `PHRASE_REPEATS` times a run of two to `PHRASE_WORDS`
  words in a row, read in stretches of at least `PROSE_WORDS` plain words (letters and their
  punctuation, which log lines with paths, numbers and brackets break); a word with a comma
  after it ("the, the, the,") counts as the word, and a sentence of at least `SENTENCE_WORDS`
  words `SENTENCE_REPEATS` times in a row is a loop too, which a paste cut after a few repeats
  still shows. What programs print over and over is not read: the literals of JSON and tensors
  (`true, false`, `nan, nan`), hex letters and base64 of a repeated byte (`abab`, `gICAgICA`), a
  status phrase with an ellipsis printed without a newline, and vLLM's request log, which quotes
  the user's prompt. In text written without spaces, the
  same sentence three times in a row ("很高兴你们能在这里。" thrice) is the loop, and so is one
  full-width comma `COMMAS` times in a row ("，，，，") or a word of one to four characters with
  its comma `CJK_REPEATS` times ("我，我，我，"): people repeat a word with its comma a few
  times ("对，对，对"), and hesitate with the enumeration comma ("うーん、、、"), not so.
- a block of an answer's lines over and over (`_block_loop`): a reasoning model or a broken one
  writes the same two to `BLOCK_LINES` lines again and again ("Wait, but ... / Yes, that's
  correct ..."), `BLOCK_REPEATS` times in a row, with blank lines between them or none. Inside
  one quoted string (a JSON answer, a repr) the lines are separated by a written "\\n", and two
  to `BLOCK_LINES` of them `ESCAPED_REPEATS` times in a row is the loop, or a single one
  `REPEATS` times where the last key before it names the answer ("content", "Output"). Programs
  print blocks over and over too, a copy for each process, request or retry: a block with a
  line that was stamped as pasted (a time, a level, a pod's or container's name, which the
  normaliser takes off), begins as a record or a label does (a time, a level, a bracket or
  parenthesis, glog's `I1229`, "Prompt: ", a status word such as "Waiting"), or holds a path, a
  C++ scope, a module's dotted name, a method called, a quoted list, an identifier in backticks,
  an exception's class or a failure or retry named, is theirs and is not read; nor is one line
  printed again and again on lines of its own. Half the block's lines must be text (eight
  letters or more, letters at least half of what is not space), and its letters
  `BLOCK_LETTERS` or more: a loop of markers or numbers is not read. A notice of plain
  sentences that several processes each print, back to back and with no prefix, and a text
  someone pasted three times still read as a loop; vLLM's, Ray's and torchrun's workers prefix
  their lines (`(VllmWorkerProcess pid=N)`, `[rank1]:`), which keeps theirs out.

The other shapes are patterns in silent-wrong-output's scenario file: an answer of only "!"
(token 0, the argmax of NaN logits), reserved special tokens, empty content cut at max_tokens.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import re2

from runner.spec.expectations import TextCheck
from runner.spec.signature import MAX_LINE
from runner.triage.match import Evidence, Log

WINDOW = 240  # characters
SCRIPTS = 4
SWITCHES = 10
GLUED = 3
CJK_LED_GLUED = 2
CJK_GLUINGS = 10
LATIN_LED = 0.75
REPEATS = 6
GLUED_REPEATS = 10
PHRASE_REPEATS = 6
PHRASE_WORDS = 8
PROSE_WORDS = 24
SENTENCE_REPEATS = 3
SENTENCE_WORDS = 6
BLOCK_LINES = 8
BLOCK_REPEATS = 3
ESCAPED_REPEATS = 4
BLOCK_LETTERS = 12

# a lowercase ASCII word (not a two-letter hex byte), then the same word
# again and again, separated by spaces or tabs only
_REPEATED = re.compile(
    rb"(?<![A-Za-z0-9])(?![a-f]{2}(?![a-z]))([a-z]+)(?:[ \t]+\1(?![A-Za-z0-9])){%d,}"
    % (REPEATS - 1)
)
# six words in a row with one first letter, on RE2 (linear): the lines the backreference of
# _REPEATED, which Python's engine reads a character at a time, is tried on
_SAME_START = re2.compile(
    b"|".join(
        rb"(?:\b%s[a-z]*[ \t]+){%d}%s" % (c, REPEATS - 1, c)
        for c in (bytes([x]) for x in range(ord("a"), ord("z") + 1))
    )
)
# a stretch of letters and hyphens long enough to hold a glued repeat (RE2, one pass), and the
# repeat itself, read in that stretch alone
_LETTER_RUN = re2.compile(rb"[A-Za-z-]{%d,}" % (2 * GLUED_REPEATS))
_GLUED = re.compile(rb"([A-Za-z-]{2,6}?)\1{%d,}" % (GLUED_REPEATS - 1))
# a stretch of plain words, where a phrase that loops is read (RE2, one pass)
_PROSE_RUN = re2.compile(rb"(?:[A-Za-z][A-Za-z',.!?;:-]*(?:[ \n]|\z)){%d,}" % PROSE_WORDS)
_LITERALS = frozenset({"true", "false", "null", "none", "nan", "inf"})
_HEX_BYTE = re.compile(r"[a-f]{2}")  # a memory dump's bytes (`ff ff`, `de ad be ef`)
_HEX_LETTERS = re.compile(rb"[a-fA-F]+")
_CAMEL = re.compile(rb"[a-z][A-Z]")
# a loop in text written without spaces: one comma over and over, or a word of one to four
# characters with its comma again and again ("我，我，我，"); RE2 finds the lines, the loop
# itself is read with a backreference on those lines alone
COMMAS = 12
CJK_REPEATS = 8
_CJK_LETTER = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}"
_CJK_COMMA_RUN = re2.compile(
    rf"，{{{COMMAS},}}|(?:[{_CJK_LETTER}]{{1,4}}[，、]){{{CJK_REPEATS},}}".encode()
)
_CJK_UNIT = re.compile(
    rf"，{{{COMMAS},}}"
    r"|((?:[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]){1,4}[，、])"
    rf"\1{{{CJK_REPEATS - 1},}}"
)
# the end of a sentence in text written without spaces
_CJK_STOP = re.compile(r"[。！？；]")
_CJK_END = re2.compile("(?:。|！|？|；)".encode())
# an answer's line breaks written inside one quoted string, six or more on one line (RE2)
_ESCAPED_LINES = re2.compile(rb"(?:\\[nr][^\n]*?){6}")
_ESCAPE = re.compile(r"\\[nr]")
# what closes a quoted string and the record around it, after an answer's last line
_CLOSING = "\"'}]), "
# what opens an answer's string after its key (": \"", "='"), before its first line
_OPENING = re.compile(r"""[:=]\s*["']""")
# the quoting a chat or a Markdown file adds in front of a pasted line
_QUOTED = re.compile(r"^(?:\s*(?:>|&gt;)\s?)*\s*")
# a key or label and the quote that opens its string ("content": ", Output [Text 0]: "): the
# last before a line that loops alone inside a string must name the answer (a program's
# message repeated in a JSON log field is not an answer's)
_KEY = re.compile(r"""([A-Za-z_][\w ]{0,30}?)["']?\s*(?:\[[^\]]*\])?\s*[:=]\s*["']""")
_ANSWER_LABEL = re.compile(
    r"(?i)\b(?:content|text|response|output|answer|completion|reply|result|generated)\b"
)
# a line a program prints, not a model: a record's start (a time, a level, a bracket or
# parenthesis, glog's I1229), a label of one or two words ("Prompt: ", "Generated text: "), a
# status word a loop prints
_RECORD = re.compile(
    r"^(?:\d{1,4}[-/:.]\d|[\[(]|(?:INFO|WARN(?:ING)?|ERROR|DEBUG|TRACE|FATAL|CRITICAL|NOTICE)\b"
    r"|(?:Info|Debug|Warning|Error|Fatal|Notice):|[IWEF]\d{4}\b|[A-Za-z]\w{0,20}(?: \w{1,20})?:\s"
    r"|(?:Waiting|Retrying|Connecting|Starting|Restarting|Stopping|Loading|Downloading|Checking"
    r"|Shutting|Killed)\b)"
)
# ... or anywhere in it: a path or a file's name, a C++ or Rust scope, a module's dotted name, a
# quoted list, an identifier in backticks, a method called, an exception's class, a failure or
# a retry named
_PROGRAM = re.compile(
    r"(?:^|[\s\"'(=])(?:~|\.{1,2})?/[\w.-]+/|\b\w+/[\w.-]+/[\w.-]+|\b[A-Za-z]:\\"
    r"|\w\.(?:py|so|cc|cpp|cu|h|rs|go|json|ya?ml|log|sh)\b|\w\.\w+:\d|\w::\w|what\(\)|\[['\"]"
    r"|[A-Za-z_]\.\w+\.[A-Za-z_]|`[^`\s]*_[^`\s]*`|\b[A-Z]\w*(?:Error|Exception)\b|\bTraceback\b"
    r"|\b(?:ERROR|FATAL|WARNING|failed|aborted|refused|unreachable|unavailable|retry(?:ing)?)\b"
    r"|terminate called|trying again|timed out|not ready|[A-Za-z_]\w*\.[A-Za-z_]\w*\("
)
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_NON_ASCII_CHAR = re.compile(r"[^\x00-\x7f]")

# the writing systems a vocabulary's tokens come from, by the first word of a letter's Unicode
# name; Han, kana and Hangul are one system, since Japanese and Korean text mixes them
_CJK = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "HALFWIDTH KATAKANA", "HALFWIDTH HANGUL")
_SYSTEMS = frozenset(
    [
        "LATIN",
        "CYRILLIC",
        "GREEK",
        "ARMENIAN",
        "GEORGIAN",
        "HEBREW",
        "ARABIC",
        "SYRIAC",
        "THAANA",
        "DEVANAGARI",
        "BENGALI",
        "GURMUKHI",
        "GUJARATI",
        "ORIYA",
        "TAMIL",
        "TELUGU",
        "KANNADA",
        "MALAYALAM",
        "SINHALA",
        "THAI",
        "LAO",
        "TIBETAN",
        "MYANMAR",
        "ETHIOPIC",
        "KHMER",
        "MONGOLIAN",
    ]
)

# the systems whose letters people's text glues to others' (no spaces in CJK; Greek symbols)
_UNSPACED = frozenset({"CJK", "Greek"})
_LATIN_CJK = frozenset({"Latin", "CJK"})

SOUP = "an answer that mixes writing systems token by token (token soup)"
REPEAT = "an answer that repeats one word, phrase or block of lines over and over"


@cache
def script(c: str) -> str | None:
    """The writing system of a letter, or None for anything that is no letter of one."""
    if not unicodedata.category(c).startswith("L"):
        return None
    name = unicodedata.name(c, "")
    if name.startswith(_CJK):
        return "CJK"
    first = name.removeprefix("FULLWIDTH ").split(" ", 1)[0]
    return first.capitalize() if first in _SYSTEMS else None


def mixed(text: str) -> tuple[int, int] | None:
    """(systems, switches) of the first stretch of `text` that reads as token soup, else None.
    A line is read up to MAX_LINE characters, as every pattern reads it."""
    text = text[:MAX_LINE]
    # most lines with other characters than ASCII hold a progress bar or one language: the
    # systems of the distinct characters rule them out before each character is read
    systems = {script(c) for c in set(_NON_ASCII_CHAR.findall(text))} | {"Latin"}
    if len(systems - {None}) < SCRIPTS - 1:
        return None
    # where each run of one system's letters starts, its system, and whether it is glued to the
    # run before: between two spaced systems (and Latin after another of them), or between Han,
    # kana or Hangul and Latin
    runs: list[tuple[int, str, bool, bool, bool]] = []
    last = -2  # where the last letter of a system was
    cjk_glued: list[int] = []  # where Han, kana or Hangul meets a Latin letter inside a word
    for i, c in enumerate(text):
        s = script(c)
        if s is None:
            continue
        if not runs or runs[-1][1] != s:
            glued = last == i - 1 and not {runs[-1][1], s} & _UNSPACED
            into_latin = glued and s == "Latin"
            cjk = last == i - 1 and {runs[-1][1], s} == _LATIN_CJK
            if cjk:
                cjk_glued.append(i)
            runs.append((i, s, glued, into_latin, cjk))
        last = i
    seen: Counter[str] = Counter()
    glued_in = into_latin_in = cjk_in = 0
    lo = 0
    for hi, (at, s, glued, into_latin, cjk) in enumerate(runs):
        seen[s] += 1
        glued_in += glued
        into_latin_in += into_latin
        cjk_in += cjk
        while at - runs[lo][0] > WINDOW:
            seen[runs[lo][1]] -= 1
            glued_in -= runs[lo][2]
            into_latin_in -= runs[lo][3]
            cjk_in -= runs[lo][4]
            lo += 1
        if hi - lo >= SWITCHES:
            # a system counts where the stretch comes back to it: a foreign name quoted once
            # in a sentence is not soup
            back = sum(1 for n in seen.values() if n >= 2)
            present = sum(1 for n in seen.values() if n >= 1)
            if (
                back >= SCRIPTS
                or (glued_in >= GLUED and present >= SCRIPTS - 1)
                or (
                    glued_in >= CJK_LED_GLUED
                    and into_latin_in >= 1
                    and cjk_in >= CJK_GLUINGS
                    and present >= SCRIPTS - 1
                )
            ):
                return max(back, present), hi - lo
    return _latin_led(text, cjk_glued) if len(cjk_glued) >= GLUED else None


def _latin_led(text: str, glued: list[int]) -> tuple[int, int] | None:
    """(systems, gluings) where GLUED words within 2 x WINDOW characters each have Han, kana or
    Hangul glued to Latin letters inside them, and the stretch around them is LATIN_LED Latin
    with a letter of a system besides Latin, CJK and Greek: soup from a vocabulary of mostly
    Latin pieces. Chinese glues Latin words into one phrase ("用vLLM部署Qwen模型": one word),
    not CJK pieces into word after word of English."""
    spaces = [m.start() for m in re.finditer(r"\s", text)]
    words = [bisect_right(spaces, i) for i in glued]  # which word each gluing is in
    for a in range(len(glued)):
        b = bisect_right(glued, glued[a] + 2 * WINDOW) - 1
        if len(set(words[a : b + 1])) < GLUED:
            continue
        stretch = text[max(0, glued[a] - WINDOW // 4) : glued[b] + WINDOW // 4]
        letters = Counter(s for s in map(script, stretch) if s is not None)
        if letters["Latin"] >= LATIN_LED * letters.total() and (
            set(letters) - _LATIN_CJK - {"Greek"}
        ):
            return len(letters), b - a + 1
    return None


def _line_at(log: Log, offset: int) -> int:
    return bisect_right(log.spaced_at, offset) - 1


def _check(log: Log) -> None:
    if log.deadline is not None:
        log.deadline.check()


def _repeated(log: Log) -> list[Evidence] | None:
    """The first line with one token or phrase over and over, spaced or glued."""
    found = [
        ev
        for ev in (
            _spaced_repeat(log),
            _glued_repeat(log),
            _phrase_repeat(log),
            _sentences(log),
            _cjk_commas(log),
            _block_loop(log),
        )
        if ev is not None
    ]
    return min(found, key=lambda ev: ev[0].number) if found else None


def _loop(words: list[str]) -> tuple[str, int] | None:
    """A run of one to PHRASE_WORDS words repeated back to back, and how many times."""
    plain = [w.rstrip(",") for w in words]
    for k in range(1, PHRASE_WORDS + 1):
        need = (REPEATS if k == 1 else PHRASE_REPEATS) - 1
        same = 0
        for i in range(len(plain) - k):
            same = same + 1 if plain[i] == plain[i + k] else 0
            if same < k * need:
                continue
            first = i - k * need + 1
            unit = plain[first : first + k]
            if _no_loop(unit):
                continue
            times, j = 1, first + k
            while plain[j : j + k] == unit:
                times, j = times + 1, j + k
            return " ".join(unit), times
    return None


def _may_loop(words: list[str]) -> bool:
    """Whether the words are counted often enough to hold a loop, before the loops are looked
    for: a phrase's words each come PHRASE_REPEATS times (a word alone REPEATS), a sentence's
    SENTENCE_WORDS words each SENTENCE_REPEATS times."""
    counts = Counter(w.rstrip(",") for w in words)
    if max(counts.values()) >= min(REPEATS, PHRASE_REPEATS):
        return True
    return sum(n for n in counts.values() if n >= SENTENCE_REPEATS) >= (
        SENTENCE_WORDS * SENTENCE_REPEATS
    )


def _sentence_loop(words: list[str]) -> tuple[str, int] | None:
    """One sentence of at least SENTENCE_WORDS words SENTENCE_REPEATS times in a row, as text
    written without spaces is read (_sentences): a longer unit than _loop's phrases, which a
    paste cut after a few repeats still shows."""
    sentences: list[str] = []
    start = 0
    for i, w in enumerate(words):
        if w[-1] in ".!?" and not w.endswith("..."):
            sentences.append(" ".join(words[start : i + 1]))
            start = i + 1
    found = _thrice(sentences, lambda a: len(a.split()) >= SENTENCE_WORDS)
    return None if found is None else (found, SENTENCE_REPEATS)


def _thrice(sentences: list[str], long_enough: Callable[[str], bool]) -> str | None:
    """The first sentence long enough that comes SENTENCE_REPEATS times in a row."""
    same = 0
    for a, b in itertools.pairwise(sentences):
        same = same + 1 if a == b and long_enough(a) else 0
        if same == SENTENCE_REPEATS - 1:
            return a
    return None


def _no_loop(unit: list[str]) -> bool:
    """A unit that repeats in text people and programs write: a capitalised word alone, the
    literals of JSON and tensors (`true, false, true, false`), a dump's hex bytes, a status
    line's phrase (`Waiting for the server...`), fewer than six characters in all."""
    text = " ".join(unit)
    if len(unit) == 1 and not (unit[0].isalpha() and unit[0].islower()):
        return True
    if all(w.lower() in _LITERALS or _HEX_BYTE.fullmatch(w) for w in unit):
        return True
    return len(unit) > 1 and (
        len(set(unit)) == 1
        or len(text) < 6
        or text.upper() == text
        or any(w.endswith("...") for w in unit)
    )


def _prompt_logged(text: bytes | bytearray) -> bool:
    """vLLM's request log quotes the prompt, which is the user's text, not the answer."""
    return b"Received request " in text and b"prompt: " in text


def _phrase_repeat(log: Log) -> list[Evidence] | None:
    """The first line whose plain words loop a phrase (or a word with commas after it). A stretch
    RE2 finds may run over several lines of one record: each line is read apart, since a short
    message printed on line after line is no loop."""
    at, data, read = log.spaced_at, log.spaced, 0
    for m in _PROSE_RUN.finditer(data):
        for k in range(_line_at(log, m.start()), _line_at(log, m.end() - 1) + 1):
            read += 1
            if not read & 0xFF:
                _check(log)
            lo, hi = max(m.start(), at[k]), min(m.end(), at[k + 1] - 1, at[k] + MAX_LINE)
            if hi - lo < 2 * PROSE_WORDS:
                continue
            words = data[lo:hi].decode(errors="replace").split()
            if len(words) < PROSE_WORDS or not _may_loop(words):
                continue
            if _prompt_logged(data[at[k] : at[k + 1]]):
                continue
            found = _loop(words) or _sentence_loop(words)
            if found is not None:
                caps = {"word": found[0], "times": str(found[1])}
                return [Evidence(REPEAT, (log.lines[k],), caps)]
    return None


def _sentences(log: Log) -> list[Evidence] | None:
    """The first line of text written without spaces where one sentence comes three times in a
    row (only lines with SENTENCE_REPEATS of its sentence ends, which RE2 finds in one pass)."""
    if log.ascii:
        return None
    for k in _lines_found(log, _CJK_END):
        text = log.lines[k].text[:MAX_LINE]
        if len(_CJK_STOP.findall(text)) < SENTENCE_REPEATS:
            continue
        parts = [p.strip() for p in _CJK_STOP.split(text)]
        found = _thrice(parts, lambda a: len(a) >= 4 and any(_is_cjk(c) for c in a))
        if found is not None:
            caps = {"word": found, "times": str(SENTENCE_REPEATS)}
            return [Evidence(REPEAT, (log.lines[k],), caps)]
    return None


def _cjk_commas(log: Log) -> list[Evidence] | None:
    """The first line of text written without spaces where one comma comes COMMAS times in a
    row, or one short word with its comma CJK_REPEATS times."""
    if log.ascii:
        return None
    for k in _lines_found(log, _CJK_COMMA_RUN):
        text = log.lines[k].text[:MAX_LINE]
        if _prompt_logged(text.encode()):
            continue
        hit = _CJK_UNIT.search(text)
        if hit is not None:
            unit = hit.group(1) or hit.group(0)[0]
            caps = {"word": unit, "times": str(len(hit.group(0)) // len(unit))}
            return [Evidence(REPEAT, (log.lines[k],), caps)]
    return None


def _lines_found(log: Log, finder: Any) -> Iterator[int]:
    """Each line (its index, once) where `finder`, on RE2, matches in one pass over the log."""
    last = -1
    for read, m in enumerate(finder.finditer(log.spaced)):
        if not read & 0xFF:
            _check(log)
        k = _line_at(log, m.start())
        if k != last:
            last = k
            yield k


def _letters(text: str) -> int:
    return sum(c.isalpha() for c in text)


def _program_line(text: str) -> bool:
    return _RECORD.match(text) is not None or _PROGRAM.search(text) is not None


def _block_ok(block: list[str]) -> bool:
    """Whether a block that loops is an answer's: no program's line in it (_RECORD, _PROGRAM),
    half its lines text and BLOCK_LETTERS letters in all."""
    if any(map(_program_line, block)):
        return False
    texts = 0
    for b in block:
        letters, solid = _letters(b), sum(not c.isspace() for c in b)
        texts += letters >= 8 and 2 * letters >= solid
    return 2 * texts >= len(block) and sum(map(_letters, block)) >= BLOCK_LETTERS


def _block_in(
    items: list[tuple[int, str]],
    sizes: range,
    repeats: int,
    stamped: Callable[[int], bool] | None = None,
) -> tuple[int, list[str], int] | None:
    """A block of `sizes` items back to back `repeats` times (one item alone REPEATS times):
    the line it starts on, the block, and how many times in a row. A block of one item over and
    over is no block of several; a block on lines a collector stamped (`stamped`) is a
    program's. Every rotation of a block holds its items, so a run whose block was refused is
    not read again until it breaks."""
    for k in sizes:
        need = (REPEATS if k == 1 else repeats) - 1
        same, refused = 0, False
        for i in range(len(items) - k):
            if items[i][1] != items[i + k][1]:
                same, refused = 0, False
                continue
            same += 1
            if same < k * need or refused:
                continue
            first = i - k * need + 1
            block = [t for _, t in items[first : first + k]]
            if (
                (k > 1 and len(set(block)) < 2)
                or not _block_ok(block)
                or (stamped is not None and any(stamped(n) for n, _ in items[first : first + k]))
            ):
                refused = True
                continue
            times, j = 1, first + k
            while [t for _, t in items[j : j + k]] == block:
                times, j = times + 1, j + k
            return items[first][0], block, times
    return None


def _repeating(log: Log) -> Iterator[list[tuple[int, str]]]:
    """Each stretch of non-blank lines where every line but the first block's is one of the
    BLOCK_LINES before it, with the BLOCK_LINES before the stretch: one pass, so that a log of a
    million lines holds no list of them and only its repeating stretches are read for blocks."""
    recent: deque[str] = deque(maxlen=BLOCK_LINES)
    before: deque[tuple[int, str]] = deque(maxlen=BLOCK_LINES)
    run: list[tuple[int, str]] = []
    seen = 0  # lines of the run that repeat one of the lines before them
    least = 2 * (BLOCK_REPEATS - 1)  # a block of two, seen twice again
    for k, t in enumerate(log.lines.texts):
        if not k & 0xFFFF:
            _check(log)
        if not t:
            continue
        if t in recent:
            if not run:
                run = list(before)
            run.append((k, t))
            seen += 1
        elif run:
            if seen >= least:
                yield run
            run, seen = [], 0
        recent.append(t)
        before.append((k, t))
    if seen >= least:
        yield run


def _stamped(log: Log) -> Callable[[int], bool]:
    """Whether line k as pasted carried what a collector or a logger puts in front of a
    program's line (a time, a level, a pod's or a container's name), which the normaliser
    took off: a block of such lines is a program's, however plain its text."""
    originals, nodes = log.lines.originals, log.lines.nodes

    def stamped(k: int) -> bool:
        return nodes[k] is not None or _RECORD.match(_QUOTED.sub("", originals[k])) is not None

    return stamped


def _labelled(text: str, at: int) -> bool:
    """Whether the last key before `at` on the line names the answer ("content", "Output")."""
    last = None
    for m in _KEY.finditer(text, 0, at):
        last = m
    return last is not None and _ANSWER_LABEL.search(last.group(1)) is not None


def _block_loop(log: Log) -> list[Evidence] | None:
    """The first block of an answer's lines over and over: on lines of their own (the blank
    lines between them skipped), or separated by a written "\\n" inside one quoted string."""
    texts = log.lines.texts
    stamped = _stamped(log)
    found = None
    for stretch in _repeating(log):
        found = _block_in(stretch, range(2, BLOCK_LINES + 1), BLOCK_REPEATS, stamped)
        if found is not None:
            break
    if found is None:
        for k in _lines_found(log, _ESCAPED_LINES):
            text = texts[k][:MAX_LINE]
            if _prompt_logged(text.encode()):
                continue
            parts = _ESCAPE.split(text)
            parts[0] = _OPENING.split(parts[0])[-1]  # the answer's first line, after its key
            items = [(k, p.strip(_CLOSING)) for p in parts if p.strip(_CLOSING)]
            found = _block_in(items, range(2, BLOCK_LINES + 1), ESCAPED_REPEATS)
            if found is None:
                alone = _block_in(items, range(1, 2), ESCAPED_REPEATS)
                if alone is not None and _labelled(text, text.find(alone[1][0])):
                    found = alone
            if found is not None:
                break
    if found is None:
        return None
    k, block, times = found
    caps = {"word": " / ".join(block)[:120], "times": str(times)}
    return [Evidence(REPEAT, (log.lines[k],), caps)]


def _is_cjk(c: str) -> bool:
    return script(c) == "CJK"


def _spaced_repeat(log: Log) -> list[Evidence] | None:
    """The first line with one word over and over: lines where six words in a row start with one
    letter (RE2, one pass) are read for the same word again and again."""
    for k in _lines_found(log, _SAME_START):
        text = log.lines[k].text[:MAX_LINE].encode()
        if _prompt_logged(text):
            continue
        hit = _REPEATED.search(text)
        if hit is not None:
            times = len(hit.group(0).split())
            caps = {"word": hit.group(1).decode(), "times": str(times)}
            return [Evidence(REPEAT, (log.lines[k],), caps)]
    return None


def _glued_repeat(log: Log) -> list[Evidence] | None:
    """The first line with one short token glued to itself again and again, read in the long
    stretches of letters RE2 finds in one pass."""
    for read, m in enumerate(_LETTER_RUN.finditer(log.spaced)):
        if not read & 0xFF:
            _check(log)
        for hit in _GLUED.finditer(m.group(0)[:MAX_LINE]):
            unit = hit.group(1)
            if len(set(unit)) < 2 or not any(c != ord("-") for c in unit):
                continue
            # a dump's hex bytes (`abab`), base64 of a repeated byte (`gICAgICA`, `IyMjIyMj`:
            # a lowercase letter before a capital, which a token's own spelling has not)
            if _HEX_LETTERS.fullmatch(unit) or _CAMEL.search(unit * 2):
                continue
            k = _line_at(log, m.start())
            if _prompt_logged(log.lines[k].text[:MAX_LINE].encode()):
                break
            times = len(hit.group(0)) // len(unit)
            caps = {"word": unit.decode(), "times": str(times)}
            return [Evidence(REPEAT, (log.lines[k],), caps)]
    return None


def _soup(log: Log) -> list[Evidence] | None:
    """The first line that reads as token soup (only lines with other characters than ASCII)."""
    if log.ascii:
        return None
    pos, size, read = 0, len(log.spaced), 0
    while (m := _NON_ASCII.search(log.spaced, pos)) is not None:
        read += 1
        k = _line_at(log, m.start())
        line = log.lines[k]
        found = mixed(line.text)
        if found is not None:
            systems, switches = found
            caps = {"systems": str(systems), "switches": str(switches)}
            return [Evidence(SOUP, (line,), caps)]
        pos = log.spaced_at[k + 1] if k + 1 < len(log.spaced_at) else size
        if not read & 0xFF:
            _check(log)
    return None


def find_garbled(log: Log, check: TextCheck) -> list[Evidence] | None:
    """The first line that shows `check`'s shape of a broken answer, as evidence."""
    if check is TextCheck.REPEATED_WORD:
        return _repeated(log)
    return _soup(log)
