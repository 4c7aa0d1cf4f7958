"""Deterministic text for the stand-in's completions.

No model runs here: a completion is a pure function of (model, prompt, max_tokens), so that the
same request always gets the same answer and a correctness probe can compare runs. Token counts use
a simple word/punctuation split, plus the chat template's fixed overhead.
"""

from __future__ import annotations

import hashlib
import re

_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)

# Qwen2's chat template adds a default system prompt and role markers around each message.
CHAT_TEMPLATE_TOKENS = 19
PER_MESSAGE_TOKENS = 5

WORDS = [
    "the",
    "service",
    "is",
    "healthy",
    "and",
    "ready",
    "to",
    "answer",
    "requests",
    ".",
    "I",
    "am",
    "a",
    "helpful",
    "assistant",
    "running",
    "on",
    "the",
    "lab",
    "engine",
    ",",
    "a",
    "stand-in",
    "for",
    "vLLM",
    "that",
    "follows",
    "its",
    "phases",
    ",",
    "messages",
    "and",
    "memory",
    "arithmetic",
    ".",
    "Every",
    "answer",
    "here",
    "is",
    "deterministic",
    "so",
    "that",
    "probes",
    "can",
    "compare",
    "runs",
    ".",
]


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def chat_prompt_tokens(messages: list[dict[str, object]]) -> int:
    n = CHAT_TEMPLATE_TOKENS
    for m in messages:
        content = m.get("content", "")
        n += PER_MESSAGE_TOKENS + count_tokens(
            content if isinstance(content, str) else str(content)
        )
    return n


def completion(model: str, prompt: str, max_tokens: int, index: int = 0) -> tuple[list[str], str]:
    """(tokens, finish_reason) of choice `index` (a request's `n` choices differ, each its own
    pure function). Ends with "stop" when the answer is shorter than max_tokens."""
    key = f"{model}\x00{prompt}" + (f"\x00{index}" if index else "")
    digest = hashlib.sha256(key.encode()).digest()
    natural = 6 + digest[0] % 18
    start = digest[1] % len(WORDS)
    n = min(natural, max_tokens)
    tokens = [(" " if i else "") + WORDS[(start + i) % len(WORDS)] for i in range(n)]
    return tokens, ("stop" if natural <= max_tokens else "length")


def top_logprobs(model: str, position: int, token: str, n: int) -> list[tuple[str, float]]:
    """The `max(n, 1)` most likely tokens at `position`, best first, with their logprobs. The
    token the engine chose is always the most likely one (the lab engine decodes greedily), so
    it heads the list; the runners-up are the words after it in the word list, each less likely
    than the one before. Pure function of (model, position, token): no randomness."""
    digest = hashlib.sha256(f"{model}\x00{position}\x00{token}".encode()).digest()
    best = -round(0.001 + digest[0] / 1000, 6)
    lead = " " if token.startswith(" ") else ""
    at = WORDS.index(token.strip()) if token.strip() in WORDS else 0
    out = [(token, best)]
    seen = {token}
    k = 1
    while len(out) < max(n, 1):
        alt = lead + WORDS[(at + k) % len(WORDS)]
        k += 1
        if alt in seen:
            continue
        seen.add(alt)
        out.append((alt, round(out[-1][1] - 0.5 - digest[len(out) % 32] / 100, 6)))
    return out


def garbage(n: int) -> list[str]:
    """What NaN logits decode to: token id 0 over and over (Qwen's "!")."""
    return ["!"] * n
