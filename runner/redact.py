"""Secrets never reach a report: environment values whose names look like tokens, keys or
passwords, API keys in command lines and vLLM's "non-default args" line, bearer tokens, and
well-known token shapes (Hugging Face, OpenAI-style) are replaced by `<redacted>`.

The undo journal is the one place values are kept as they were (undo must restore them); it is
written with owner-only permissions.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "<redacted>"
SECRET_NAME = re.compile(
    r"(?i)(token|secret|passw(or)?d|api[_-]?key|credential|private[_-]?key|access[_-]?key|auth)"
)

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # NAME=value where NAME looks secret (env dumps, "env set HF_TOKEN=...")
    (
        re.compile(
            r"\b([A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIALS?|"
            r"ACCESS_KEY|PRIVATE_KEY)[A-Za-z0-9_]*)=([^\s,;'\"]+)",
            re.I,
        ),
        rf"\1={MASK}",
    ),
    # --api-key VALUE / --api-key=VALUE (vLLM's flag), and its Python-dict form
    (re.compile(r"(--api[-_]key[= ])(\S+)"), rf"\1{MASK}"),
    (
        re.compile(r"(['\"](?:api_key|token|password)['\"]\s*:\s*)(['\"])(.*?)\2", re.I),
        rf"\1\2{MASK}\2",
    ),
    (
        re.compile(r"(?i)(authorization:\s*bearer\s+|bearer\s+)([A-Za-z0-9._~+/=-]{8,})"),
        rf"\1{MASK}",
    ),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"), MASK),
    # kubeconfig credentials
    (
        re.compile(r"((?:client-key-data|client-certificate-data|token|password):\s*)(\S+)"),
        rf"\1{MASK}",
    ),
]


def redact(text: str) -> str:
    for rx, repl in _PATTERNS:
        text = rx.sub(repl, text)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if SECRET_NAME.search(k) else v) for k, v in env.items()}


def redact_obj(obj: Any) -> Any:
    """Every string in a JSON-like structure, redacted."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, list):
        return [redact_obj(x) for x in obj]
    if isinstance(obj, dict):
        return {
            k: (
                MASK
                if isinstance(v, str)
                and SECRET_NAME.search(str(k))
                and k not in ("name", "event", "title", "text", "expected", "observed", "detail")
                else redact_obj(v)
            )
            for k, v in obj.items()
        }
    return obj
