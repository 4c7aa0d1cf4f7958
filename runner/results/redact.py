"""Secrets never reach a report: values whose names look like tokens, keys or passwords (in
environment dumps, `NAME=value`, `NAME: value`, Python or JSON dicts, `--flag value` command
lines, vLLM's "non-default args" line), authorization and cookie headers, passwords in URLs,
`curl -u user:password`, `mysql -pPASSWORD`, "password hunter2" in prose, PEM private keys (the
block, or what is left of it after a cut), and token shapes are replaced by `<redacted>`.

The token shapes are a secret scanner's: the regex detectors of detect-secrets (AWS access keys,
GitHub, GitLab, Slack, Stripe, PyPI and npm tokens, JSON Web Tokens, ...), maintained with the
services' formats, plus Hugging Face's and OpenAI-style keys. Its detectors that need
lookaround, and those whose matches are not secrets (public IP addresses) or that gameday's own
rules cover with the context kept readable (a URL's password, a key's header line), are left
out.

The patterns run on RE2 (runner.spec.patterns), so redaction takes time linear in the text,
however long a log line is; the token shapes run as one pattern, in one pass.

The undo journal is the one place values are kept as they were (undo must restore them); it is
written with owner-only permissions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

from runner.spec.patterns import Match, Regex, compile_user

MASK = "<redacted>"

# A name that holds a secret. Token counts (max_tokens, max_num_batched_tokens) and "tokenizer"
# are counts and paths, not credentials; other plurals (API_TOKENS) are secrets.
_SECRET_WORD = (
    r"token|secret|passw(?:or)?d|passphrase|credential|api[_-]?key|private[_-]?key|"
    r"access[_-]?key|key[_-]data|certificate[_-]data|authorization|cookie"
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
# a PEM private key: the block from its header to its footer (or to the end of the text, where
# the output was cut); and what a cut left of one, its last base64 lines before the footer
_PEM = compile_user(
    r"(?s)(?P<begin>-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----).*?"
    r"(?P<end>-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\z)"
)
_PEM_TAIL = compile_user(
    r"(?:[A-Za-z0-9+/=]{16,}(?:\r?\n|\\n))+(?P<end>-----END [A-Z0-9 ]{0,40}PRIVATE KEY)"
)
_PATTERNS = [
    (_PEM, rf"\g<begin>{MASK}\g<end>"),
    (_PEM_TAIL, rf"{MASK}\g<end>"),
    # bearer tokens outside a header
    (compile_user(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\g<keep>{MASK}"),
    # user:password@ in a URL
    (
        compile_user(r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"),
        rf"\g<keep>{MASK}@",
    ),
    # curl -u / --user / -U / --proxy-user user:password (the user stays readable), on a curl
    # command line only (`sort -u a:b` is no password)
    (
        compile_user(
            r"(?P<keep>\bcurl\b(?:[ \t]+[^\s]+)*?[ \t]+['\"]?(?:-u|-U|--user|--proxy-user)"
            r"(?:=|\s+)?['\"]?[^\s:'\"]*:)"
            r"[^\s'\"]+"
        ),
        rf"\g<keep>{MASK}",
    ),
    # a cookie header's value, to the end of its line or quote; curl's -b / --cookie
    (
        compile_user(r"(?i)(?P<keep>\b(?:set-)?cookie['\"]?\s*:\s*)[^\r\n'\"]*[^\s'\"]"),
        rf"\g<keep>{MASK}",
    ),
    (
        compile_user(r"(?P<keep>(?:^|\s)(?:-b|--cookie)\s+['\"]?)[^\s'\"]*=[^\s'\"]*"),
        rf"\g<keep>{MASK}",
    ),
    # the MySQL and MariaDB clients take a password glued to -p
    (
        compile_user(
            r"(?P<keep>\b(?:mysql|mariadb)[\w-]*(?:[ \t]+[^\s]+)*?[ \t]+-p)"
            r"(?:'[^'\n]*'?|\"[^\"\n]*\"?|[^\s'\"<]\S*)"
        ),
        rf"\g<keep>{MASK}",
    ),
    (compile_user(r"\bhf_[A-Za-z0-9]{20,}\b"), MASK),
    (compile_user(r"\bsk-[A-Za-z0-9_-]{20,}\b"), MASK),
]
# "password hunter2": a password word then a bare value, in prose or an argument list; the words
# a sentence about passwords goes on with are not values
_PROSE = compile_user(
    r"(?i)(?P<keep>\b(?:password|passwd|passphrase)\s+)(?P<value>[^\s'\",;<][^\s'\",;]*)"
)
_PROSE_WORD = re.compile(
    r"(?i)is|was|are|were|for|of|to|and|or|the|an?|in|on|at|by|with|not|no|must|should|will"
    r"|can(?:not)?|could|may|authentication|incorrect|invalid|required|expired|changed|reset"
    r"|prompt|policy|file|updated|accepted|rejected"
)
# characters of a token a shape's match ends inside (a lazy JWT signature, a longer key)
_TOKEN_TAIL = r"[A-Za-z0-9_.+/=~-]*"
# detectors left out: their matches are not secrets, or gameday's rules above mask the secret
# with its context kept readable
_WORD_END = r"(?!\w)"
# separators a detector's pattern consumes around its token (Artifactory's): the token's word
# boundary instead, so the separator and the next word stay readable
_SEP_BEFORE = r'(?:\s|=|:|"|^)'
_SEP_AFTER = r'(?:\s|"|$)'
_LEFT_OUT = frozenset({"IPPublicDetector", "BasicAuthDetector", "PrivateKeyDetector"})


@cache
def token_shapes() -> Regex:
    """detect-secrets' regex detectors as one RE2 pattern (each detector's patterns that RE2
    compiles; GitLab's trailing `(?!\\w)` and Artifactory's separators are dropped, as the token
    tail runs to the word's end)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    parts = []
    detectors: list[type[Any]] = list(get_mapping_from_secret_type_to_class().values())
    for cls in detectors:
        if not issubclass(cls, RegexBasedDetector) or cls.__name__ in _LEFT_OUT:
            continue
        for rx in getattr(cls, "denylist", ()):
            flags = "i" if rx.flags & re.IGNORECASE else ""
            body = rx.pattern.removesuffix(_WORD_END).removesuffix(_SEP_AFTER)
            if body.startswith(_SEP_BEFORE):
                body = r"\b" + body.removeprefix(_SEP_BEFORE)
            part = f"(?{flags}:{body})"
            try:
                compile_user(part)
            except ValueError:
                continue  # lookaround: an assignment form the name rules above cover
            parts.append(part)
    return compile_user(f"(?:{'|'.join(parts)}){_TOKEN_TAIL}")


def _prose(m: Match) -> str:
    value = str(m.group("value"))
    if _PROSE_WORD.fullmatch(value):
        return str(m.group(0))
    return f"{m.group('keep')}{MASK}"


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
    text = _PROSE.sub(_prose, text)
    return token_shapes().sub(MASK, text)


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
