"""Probes of a serving endpoint: HTTP status and the inference probe (a real completion).

A probe's verdict is one of passed / failed / error: a probe that could not be made (connection
refused, timeout) is an *error*, not a failure of what it checks, and reports say which.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

import httpx

from runner.scenario import HttpProbe, InferenceProbe

Probe = HttpProbe | InferenceProbe


class ProbeVerdict(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


@dataclass(frozen=True)
class ProbeResult:
    name: str
    verdict: ProbeVerdict
    expected: str
    observed: str


def describe(p: Probe) -> str:
    if isinstance(p, HttpProbe):
        return f"GET {p.path}"
    return f"inference ({p.api})"


MIN_TIMEOUT_S = 1.0  # HTTP's own fixed costs do not scale with the lab


def run_probe(
    client: httpx.Client, base_url: str, p: Probe, scale: float = 1.0, model: str | None = None
) -> ProbeResult:
    """Run one probe. Its timeout is real-world seconds, divided by the lab's time scale."""
    name = describe(p)
    timeout = max(p.timeout_s / scale, MIN_TIMEOUT_S)
    if isinstance(p, HttpProbe):
        expected = f"HTTP {p.expect_status}"
        try:
            r = client.get(base_url + p.path, timeout=timeout)
        except httpx.HTTPError as exc:
            return ProbeResult(name, ProbeVerdict.ERROR, expected, _err(exc))
        ok = r.status_code == p.expect_status
        return ProbeResult(
            name,
            ProbeVerdict.PASSED if ok else ProbeVerdict.FAILED,
            expected,
            f"HTTP {r.status_code}",
        )
    want = p.expect_finish_reason.value if p.expect_finish_reason else "any"
    expected = f"HTTP 200, non-empty answer, finish_reason {want}"
    try:
        if model is None:
            models = client.get(base_url + "/v1/models", timeout=timeout).json()
            model = models["data"][0]["id"]
        if p.api == "chat":
            body = {
                "model": model,
                "messages": [{"role": "user", "content": p.prompt}],
                "max_tokens": p.max_tokens,
                "temperature": p.temperature,
            }
            r = client.post(base_url + "/v1/chat/completions", json=body, timeout=timeout)
        else:
            body = {
                "model": model,
                "prompt": p.prompt,
                "max_tokens": p.max_tokens,
                "temperature": p.temperature,
            }
            r = client.post(base_url + "/v1/completions", json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        return ProbeResult(name, ProbeVerdict.ERROR, expected, _err(exc))
    except (KeyError, IndexError, ValueError, TypeError):
        return ProbeResult(name, ProbeVerdict.FAILED, expected, "/v1/models lists no model")
    if r.status_code != 200:
        return ProbeResult(
            name, ProbeVerdict.FAILED, expected, f"HTTP {r.status_code}: {r.text[:200]}"
        )
    try:
        choice = r.json()["choices"][0]
        text = choice["message"]["content"] if p.api == "chat" else choice["text"]
        reason = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, json.JSONDecodeError):
        return ProbeResult(
            name, ProbeVerdict.FAILED, expected, f"not an OpenAI completion: {r.text[:200]}"
        )
    observed = f"HTTP 200, {len(text)} chars, finish_reason {reason}: {text[:80]!r}"
    ok = bool(text.strip()) and (
        p.expect_finish_reason is None or reason == p.expect_finish_reason.value
    )
    return ProbeResult(name, ProbeVerdict.PASSED if ok else ProbeVerdict.FAILED, expected, observed)


def _err(exc: httpx.HTTPError) -> str:
    kind = type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"probe error: connection refused ({kind})"
    if isinstance(exc, httpx.TimeoutException):
        return f"probe error: timed out ({kind})"
    return f"probe error: {kind}: {exc}"
