"""The correctness probe: silent wrong output (seeds/003).

A reference pass sends each known-answer prompt alone (temperature 0, logprobs); the load pass then
sends `requests` of them, `concurrency` at a time, each with its own X-Request-Id, and compares
every answer and its per-token logprobs with the reference. The evidence names the request ids
that diverged, how far, and after how many requests the first one did.
"""

from __future__ import annotations

import itertools
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated

import httpx
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from runner.scenario import CorrectnessProbe


@dataclass(frozen=True)
class Answer:
    request_id: str
    text: str
    logprobs: tuple[float, ...]


@dataclass(frozen=True)
class Divergence:
    index: int  # 1-based: the how-manieth request of the load pass
    request_id: str
    prompt: str
    got: str
    want: str
    logprob_gap: float | None  # largest per-token |logprob - reference|; None: no logprobs


class _Shape(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class _Logprobs(_Shape):
    token_logprobs: list[float] | None = None


class _Choice(_Shape):
    text: str
    logprobs: _Logprobs | None = None


class _Completion(_Shape):
    """The part of an OpenAI /v1/completions answer the probe reads."""

    id: str | None = None
    choices: Annotated[list[_Choice], Field(min_length=1)]


class NotCompletions(ValueError):
    """An answer that is not in the OpenAI completions shape; the message names the field."""


def ask(
    client: httpx.Client, url: str, p: CorrectnessProbe, prompt: str, rid: str, timeout: float
) -> Answer:
    body = {"prompt": prompt, "max_tokens": p.max_tokens, "temperature": 0, "logprobs": 1}
    r = client.post(
        url + "/v1/completions", json=body, headers={"X-Request-Id": rid}, timeout=timeout
    )
    r.raise_for_status()
    try:
        data = _Completion.model_validate_json(r.content)
    except pydantic.ValidationError as exc:
        field = ".".join(map(str, exc.errors()[0]["loc"])) or "the body (not a JSON object)"
        raise NotCompletions(f"answer not in the OpenAI completions shape: {field}") from None
    choice = data.choices[0]
    lps = choice.logprobs.token_logprobs if choice.logprobs else None
    return Answer(data.id or rid, choice.text, tuple(lps or ()))


def gap(got: Answer, want: Answer) -> float | None:
    if not got.logprobs or not want.logprobs:
        return None
    pairs = list(itertools.zip_longest(got.logprobs, want.logprobs, fillvalue=0.0))
    return round(max(abs(a - b) for a, b in pairs), 6)


def check(
    client: httpx.Client, url: str, p: CorrectnessProbe, timeout: float
) -> tuple[int, list[Divergence]]:
    """(requests sent under load, the divergent ones in request order); `timeout` is each
    request's, in the lab's seconds."""
    tag = uuid.uuid4().hex[:8]
    reference = {
        q: ask(client, url, p, q, f"gameday-ref-{tag}-{i}", timeout)
        for i, q in enumerate(p.prompts)
    }
    jobs = [(i + 1, p.prompts[i % len(p.prompts)]) for i in range(p.requests)]

    def one(job: tuple[int, str]) -> tuple[int, str, Answer]:
        return job[0], job[1], ask(client, url, p, job[1], f"gameday-{tag}-{job[0]}", timeout)

    out: list[Divergence] = []
    with ThreadPoolExecutor(max_workers=p.concurrency, thread_name_prefix="correct") as pool:
        for index, prompt, got in pool.map(one, jobs):
            want = reference[prompt]
            g = gap(got, want)
            if got.text != want.text or (g is not None and g > p.logprob_tolerance):
                out.append(Divergence(index, got.request_id, prompt, got.text, want.text, g))
    return len(jobs), out


def describe(sent: int, bad: list[Divergence]) -> str:
    if not bad:
        return f"{sent} requests under load, every answer and logprob as the reference"
    first = bad[0]
    shown = "; ".join(
        f"{d.request_id}: {d.got[:40]!r} (reference {d.want[:40]!r}"
        + (f", logprob gap {d.logprob_gap:g})" if d.logprob_gap is not None else ")")
        for d in bad[:3]
    )
    return (
        f"{len(bad)} of {sent} requests diverged; the first after {first.index} requests; {shown}"
    )
