"""Secrets never reach a report: values whose names look like tokens, keys or passwords (in
environment dumps, `NAME=value`, `NAME: value`, Python or JSON dicts, `--flag value` command
lines, vLLM's "non-default args" line), authorization headers, passwords in URLs, and
well-known token shapes (Hugging Face, OpenAI-style) are replaced by `<redacted>`.

The patterns run on RE2 (runner.spec.patterns), so redaction takes time linear in the text, however
long a log line is.

The undo journal is the one place values are kept as they were (undo must restore them); it is
written with owner-only permissions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runner.spec.patterns import Match, compile_user

MASK = "<redacted>"

# A name that holds a secret. Token counts (max_tokens, max_num_batched_tokens) and "tokenizer"
# are counts and paths, not credentials; other plurals (API_TOKENS) are secrets.
_SECRET_WORD = (
    r"token|secret|passw(?:or)?d|passphrase|credential|api[_-]?key|private[_-]?key|"
    r"access[_-]?key|key[_-]data|certificate[_-]data|authorization"
)
_SECRET_SUFFIX = r"(?:^|[_.-])(?:key|pass|auth|pwd)$"
_SECRET_NAME = compile_user(rf"(?i)(?:{_SECRET_WORD})|{_SECRET_SUFFIX}")
_NOT_SECRET = compile_user(
    r"(?i)(?:max|num|batched|prompt|completion|total|new|output|input|cached)[_-]?tokens|tokeniz"
)

# the characters of a name in `NAME=value`, `"name": value`, `--name value`
_NAME_CHARS = r"[A-Za-z0-9_.-]"
# a value: quoted (to its closing quote, or the end of the line if it has none), or bare (to the
# next space or closing bracket: commas and semicolons inside a bare value are part of it,
# `A=x,y`, one that ends it is not)
_VALUE = r"""(?:"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?|[^\s'"}\])]*[^\s,;'"}\])])"""
# an authorization scheme stays readable: `Authorization: Basic <redacted>`
_SCHEME = r"(?:(?i:basic|bearer|token|digest|negotiate)\s+)?"

_SECRETISH = (
    rf"{_NAME_CHARS}*(?:(?:{_SECRET_WORD}){_NAME_CHARS}*|[_.-](?:key|pass|auth|pwd))"
    r"|\b(?:key|pass|auth|pwd)"
)
# NAME=value, NAME: value, "NAME": "value", 'name': 'value', --name=value, Authorization: ...
_ASSIGNMENT = compile_user(
    rf"""(?i)(?P<name>{_SECRETISH})(?P<sep>["']?\s*[=:]\s*)(?P<scheme>{_SCHEME})"""
    rf"""(?P<value>{_VALUE})"""
)
# --name value (a command line)
_FLAG = compile_user(
    rf"(?i)(?P<name>--?{_NAME_CHARS}*(?:{_SECRET_WORD}|[_.-](?:key|pass|auth|pwd)))"
    rf"(?P<sep>\s+)(?P<scheme>)(?P<value>{_VALUE})"
)
_PATTERNS = [
    # bearer tokens outside a header
    (compile_user(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\g<keep>{MASK}"),
    # user:password@ in a URL
    (
        compile_user(r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"),
        rf"\g<keep>{MASK}@",
    ),
    (compile_user(r"\bhf_[A-Za-z0-9]{20,}\b"), MASK),
    (compile_user(r"\bsk-[A-Za-z0-9_-]{20,}\b"), MASK),
]


def secret_name(name: str) -> bool:
    """Whether a variable, key or flag of this name holds a secret."""
    return _SECRET_NAME.search(_NOT_SECRET.sub("", name)) is not None


def _assignment(m: Match) -> str:
    name, sep, scheme, value = m.group("name", "sep", "scheme", "value")
    if not secret_name(name):
        return str(m.group(0))
    quote = value[0] if value[:1] in ("'", '"') else ""
    closed = quote if len(value) > 1 and value.endswith(quote) else ""
    return f"{name}{sep}{scheme}{quote}{MASK}{closed}"


def redact(text: str) -> str:
    text = _ASSIGNMENT.sub(_assignment, text)
    text = _FLAG.sub(_assignment, text)
    for rx, repl in _PATTERNS:
        text = rx.sub(repl, text)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if secret_name(k) else v) for k, v in env.items()}


def _same(text: str) -> str:
    return text


def redact_obj(obj: Any, then: Callable[[str], str] = _same) -> Any:
    """Every string in a JSON-like structure, redacted; a string under a secret key, masked.
    `then` is applied to every string and key afterwards, in the same walk (the reports make them
    printable)."""
    if isinstance(obj, str):
        return then(redact(obj))
    if isinstance(obj, list):
        return [redact_obj(x, then) for x in obj]
    if isinstance(obj, dict):
        # an environment list entry, as Kubernetes and Docker write them: {name: X, value: v}
        named = obj.get("name")
        if isinstance(named, str) and isinstance(obj.get("value"), str) and secret_name(named):
            obj = {**obj, "value": MASK}
        return {
            then(str(k)): (
                MASK if isinstance(v, str) and secret_name(str(k)) else redact_obj(v, then)
            )
            for k, v in obj.items()
        }
    return obj
