"""Pasted logs as people paste them, made matchable line by line.

Each original line becomes one `Line`: the text a signature reads (quoting, list markers and the
prefixes that log collectors put in front taken off; digits someone masked read as digits) and
the line number and text as pasted, which evidence quotes. Which lines continue the one before
(a message wrapped at a terminal's width or by an editor) is the matcher's business: it reads
windows of lines (runner.triage.match), so no guess made here can lose a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Prefixes that collectors put in front of every line, tried repeatedly in any order (a quoted
# `kubectl logs --prefix --timestamps` carries three). Each names its node where it can.
_RUNTIME_TS = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})(?:\s|$)"
)  # kubectl logs --timestamps, docker logs -t (RFC 3339 with a zone)
_KUBECTL_PREFIX = re.compile(r"^\[pod/(?P<node>[\w.-]+)/[\w.-]+\] ?")  # kubectl logs --prefix
_COMPOSE_PREFIX = re.compile(r"^(?P<node>[a-zA-Z0-9][\w.-]*)\s+\| ?")  # docker compose logs
_JOURNALD_PREFIX = re.compile(
    r"^[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} (?P<node>[\w.-]+) [\w./@-]+(?:\[\d+\])?: "
)  # journalctl's short format: "Nov 30 12:00:01 host vllm[123]: "
# quoting and list markers a chat, a mail or a Markdown file adds
_QUOTE = re.compile(r"^(?:>|&gt;|\|)(?: |$)")
_LIST_MARKER = re.compile(r"^(?:[-*•→]|\d{1,2}[.)])\s+")
_FENCE = re.compile(r"^(?:```|~~~)")
# masked digits: a run of x, X, * or # standing where digits stood (an address or a number):
# two or more mask characters, or one beside a dot or colon that separates numbers
_MASK = re.compile(
    r"(?<![A-Za-z_])(?:[xX]{2,}|\*{2,}|#{2,}|(?<=[.:])[xX*#](?=[.:\s]|$)|[xX*#](?=[.:][\dxX*#]))"
    r"(?![A-Za-z_])"
)


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


@dataclass(frozen=True)
class Line:
    """One pasted line: `number` is 1-based as an editor shows it; `text` is what signatures
    read; `node` is the node or pod a collector's prefix named."""

    number: int
    original: str
    text: str
    node: str | None = None


def unmask(text: str) -> str:
    """Masked digits read as zeros, so `10.100.xxx.xx` is an address to a `[0-9.]+` pattern."""
    return _MASK.sub(lambda m: "0" * len(m.group(0)), text)


def _strip_prefixes(text: str) -> tuple[str, str | None]:
    node = None
    for _ in range(8):  # each pass takes off one layer; a line carries at most a few
        before = text
        text = text.strip()
        if _FENCE.match(text):
            return "", node
        text = _QUOTE.sub("", text, count=1)
        text = _RUNTIME_TS.sub("", text, count=1)
        for rx in (_KUBECTL_PREFIX, _COMPOSE_PREFIX, _JOURNALD_PREFIX):
            m = rx.match(text)
            if m:
                node = node or m.group("node")
                text = text[m.end() :]
        text = _LIST_MARKER.sub("", text, count=1)
        if text == before:
            break
    return text, node


def normalise(text: str) -> list[Line]:
    lines = []
    for number, original in enumerate(text.splitlines(), start=1):
        body, node = _strip_prefixes(fold_typography(original).replace("\t", " "))
        lines.append(Line(number=number, original=original, text=unmask(body), node=node))
    return lines
