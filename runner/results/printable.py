"""Text from logs, labs and scenario files, made safe to show: control characters (ESC, NUL,
the C1 set, which would drive a terminal or make XML ill-formed), lone surrogates and the
non-characters U+FFFE/U+FFFF become visible escapes such as `\\x1b` and `\\udc80`. Newlines
and tabs stay as they are."""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    return _UNSAFE.sub(_escape, text)
