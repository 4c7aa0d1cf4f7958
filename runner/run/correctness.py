"""The correctness probe: silent wrong output (the Jamba write-up).

A reference pass sends each known-answer prompt alone (temperature 0, logprobs); the load pass then
sends `requests` of them, `concurrency` at a time, each with its own X-Request-Id, and compares
every answer and its per-token logprobs with the reference. The evidence names the request ids
that diverged, how far, and after how many requests the first one did: counted over every
request the run's correctness probes sent to that engine (the same process: a restart starts
the count again), since a fault may need more than one pass to show.

The reference is recorded at baseline where the scenario has a correctness probe there: the run
keeps it (`References`, keyed by node, prompts and max_tokens) and later probes compare with it
rather than with a serial pass of their own. A fault that makes every answer wrong alike, serial
or under load (a wrong model, a broken build), is only visible against the healthy engine's
answers; the baseline probe itself still checks its load pass against its own serial pass.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated

import httpx
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from runner.spec.probes import CorrectnessProbe


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
    reference_id: str  # the request id of the reference answer


OWN_PASS = "its own serial pass"


@dataclass(frozen=True)
class RefKey:
    """What makes two correctness probes' answers comparable: the node, the prompts in order
    and the length asked for (temperature and logprobs are always the same)."""

    node: str
    prompts: tuple[str, ...]
    max_tokens: int

    @classmethod
    def of(cls, node: str, p: CorrectnessProbe) -> RefKey:
        return cls(node, tuple(p.prompts), p.max_tokens)


@dataclass(frozen=True)
class Reference:
    answers: Mapping[str, Answer]  # prompt -> its serial answer
    recorded_at: datetime | None = None  # None: made by the probe that compares with it

    @property
    def source(self) -> str:
        """What the evidence calls it."""
        if self.recorded_at is None:
            return OWN_PASS
        return f"the reference recorded at baseline {self.recorded_at:%Y-%m-%d %H:%M:%S} UTC"

    @property
    def request_ids(self) -> str:
        ids = [a.request_id for a in self.answers.values()]
        return ids[0] if len(ids) == 1 else f"{ids[0]} .. {ids[-1]}"


@dataclass(frozen=True)
class Engine:
    """One engine process: a node's configuration generation and its start within it. A restart
    is a new engine, with its state buffer empty again."""

    node: str
    generation: int
    incarnation: int


@dataclass
class References:
    """A run's recorded references, and how many requests the correctness probes have sent to
    each engine. Probes of one set run in threads, hence the lock."""

    _kept: dict[RefKey, Reference] = field(default_factory=dict)
    _sent: dict[Engine, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def tally(self, engine: Engine, sent: int) -> int:
        """Count `sent` more requests to `engine`; the number it had before them."""
        with self._lock:
            before = self._sent.get(engine, 0)
            self._sent[engine] = before + sent
        return before

    def put(self, key: RefKey, ref: Reference, at: datetime | None = None) -> Reference:
        kept = Reference(ref.answers, at or datetime.now(UTC))
        with self._lock:
            self._kept[key] = kept
        return kept

    def get(self, key: RefKey) -> Reference | None:
        with self._lock:
            return self._kept.get(key)


@dataclass(frozen=True)
class Checked:
    sent: int  # requests under load
    divergent: list[Divergence]  # in request order
    reference: Reference  # what they were compared with
    serial: int = 0  # requests of the serial pass made first (0: a recorded reference)

    @property
    def total(self) -> int:
        """Every request this probe sent to the engine."""
        return self.serial + self.sent


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


def serial_pass(
    client: httpx.Client, url: str, p: CorrectnessProbe, timeout: float, tag: str
) -> Reference:
    """Each prompt alone: the answers of an engine under no load."""
    return Reference(
        {
            q: ask(client, url, p, q, f"gameday-ref-{tag}-{i}", timeout)
            for i, q in enumerate(p.prompts)
        }
    )


def check(
    client: httpx.Client,
    url: str,
    p: CorrectnessProbe,
    timeout: float,
    reference: Reference | None = None,
) -> Checked:
    """The load pass, compared with `reference` (None: a serial pass made first); `timeout` is
    each request's, in the lab's seconds."""
    tag = uuid.uuid4().hex[:8]
    serial = 0
    if reference is None:
        reference = serial_pass(client, url, p, timeout, tag)
        serial = len(reference.answers)
    jobs = [(i + 1, p.prompts[i % len(p.prompts)]) for i in range(p.requests)]

    def one(job: tuple[int, str]) -> tuple[int, str, Answer]:
        return job[0], job[1], ask(client, url, p, job[1], f"gameday-{tag}-{job[0]}", timeout)

    out: list[Divergence] = []
    with ThreadPoolExecutor(max_workers=p.concurrency, thread_name_prefix="correct") as pool:
        for index, prompt, got in pool.map(one, jobs):
            want = reference.answers[prompt]
            g = gap(got, want)
            if got.text != want.text or (g is not None and g > p.logprob_tolerance):
                out.append(
                    Divergence(
                        index, got.request_id, prompt, got.text, want.text, g, want.request_id
                    )
                )
    return Checked(len(jobs), out, reference, serial)


def describe(checked: Checked, source: str, before: int | None = None) -> str:
    """The evidence: what diverged, by request id on both sides, and what it was compared
    with (`source`: how the probe names its reference). `before`: the requests earlier
    correctness probes sent to the same engine (None: not counted), so that "after how many
    requests" counts every request this engine had from the run, not this pass's alone."""
    sent, bad = checked.sent, checked.divergent
    against = f"{source} ({checked.reference.request_ids})"
    if not bad:
        return f"{sent} requests under load, every answer and logprob as {against}"
    first = bad[0]
    shown = "; ".join(
        f"{d.request_id}: {d.got[:40]!r} (reference {d.want[:40]!r} from {d.reference_id}"
        + (f", logprob gap {d.logprob_gap:g})" if d.logprob_gap is not None else ")")
        for d in bad[:3]
    )
    after = f"the first after {first.index} requests"
    if before is not None and before + checked.serial:
        after += (
            f" of this pass, {before + checked.serial + first.index} of the run's correctness "
            f"requests to this engine ({before} from earlier probes, {checked.serial} from this "
            "one's serial pass)"
        )
    return f"{len(bad)} of {sent} requests diverged; {after}; {shown}; compared with {against}"
