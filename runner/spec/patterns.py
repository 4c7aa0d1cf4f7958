"""Regular expressions that come from users (scenario signatures, capture groups, `log_silence`,
GPU process names, `timeline --match`) and the redaction patterns run on RE2 (google-re2).

RE2 matches in time linear in the text whatever the pattern, so no pattern a scenario file holds
and no log line can make gameday hang. It lacks backreferences and lookaround; `compile` names
such a construct in its error, so a scenario says what to rewrite when it loads. Syntax:
https://github.com/google/re2/wiki/Syntax (Python's `(?P<name>...)` groups work as they are).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

import re2

__all__ = ["Match", "Regex", "compile_user"]


class Match(Protocol):
    def group(self, *groups: int | str) -> Any: ...
    def groupdict(self) -> dict[str, str | None]: ...


class Regex(Protocol):
    @property
    def groupindex(self) -> Mapping[str, int]: ...
    def search(self, text: str) -> Match | None: ...
    def sub(self, repl: str | Callable[[Match], str], text: str) -> str: ...


def _options() -> Any:
    opts = re2.Options()
    opts.log_errors = False  # the error reaches the user through ScenarioError, not stderr
    return opts


_OPTIONS = _options()

# RE2's parse errors, for constructs Python's `re` has and RE2 does not
_UNSUPPORTED: list[tuple[str, str]] = [
    ("(?=", "lookahead (?=...)"),
    ("(?!", "negative lookahead (?!...)"),
    ("(?<=", "lookbehind (?<=...)"),
    ("(?<!", "negative lookbehind (?<!...)"),
    ("(?P=", "the named backreference (?P=name)"),
    ("(?>", "the atomic group (?>...)"),
    ("(?(", "the conditional group (?(...)...)"),
    ("(?#", "the comment group (?#...)"),
]


def _explain(pattern: str, message: str) -> str:
    for marker, construct in _UNSUPPORTED:
        if marker in message or (marker == "(?P=" and "(?P" in message and marker in pattern):
            return construct
    m = re.search(r"invalid escape sequence: (\\\S+)", message)
    if m:
        esc = m.group(1)
        if esc[1:].isdigit():
            return f"the backreference {esc}"
        if esc == r"\Z":
            return r"\Z (RE2 spells end of text \z)"
        return f"the escape {esc}"
    if "bad repetition operator" in message:
        return "a quantifier on a quantifier (++, *+, **, ?+: possessive or repeated)"
    return ""


def compile_user(pattern: str) -> Regex:
    """`pattern` on RE2. Raises ValueError saying what is wrong: RE2 lacks a construct, or the
    pattern is no regex at all."""
    try:
        return cast(Regex, _SafeText(re2.compile(pattern, _OPTIONS)))
    except re2.error as exc:
        raw = exc.args[0] if exc.args else ""
        message = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    construct = _explain(pattern, message)
    if construct:
        raise ValueError(
            f"regex uses {construct}, which RE2 does not support: gameday matches patterns "
            "with RE2, in linear time (no backreferences or lookaround); see "
            "docs/scenario-format.md 'Scenario format'"
        )
    raise ValueError(
        f"regex does not compile as RE2 syntax: {message} "
        "(see docs/scenario-format.md 'Scenario format')"
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


class _SafeText:
    """RE2 matches UTF-8: a str holding lone surrogates (bytes a log decoded with
    surrogateescape) cannot be encoded, so those become U+FFFD, one character for one, and
    every offset stays where it was."""

    __slots__ = ("_rx",)

    def __init__(self, rx: Any) -> None:
        self._rx = rx

    @property
    def groupindex(self) -> Mapping[str, int]:
        return cast(Mapping[str, int], self._rx.groupindex)

    @staticmethod
    def _text(text: str) -> str:
        return _SURROGATE.sub("\ufffd", text)

    def search(self, text: str) -> Match | None:
        return cast("Match | None", self._rx.search(self._text(text)))

    def sub(self, repl: str | Callable[[Match], str], text: str) -> str:
        return cast(str, self._rx.sub(repl, self._text(text)))
