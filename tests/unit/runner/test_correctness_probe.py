"""The correctness probe: a reference pass, then the load pass compared answer by answer and
logprob by logprob, with the request ids of the divergent answers in the evidence."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from typing import Any, cast

import httpx
import pytest

from runner.labs.base import LabDriver, NodeState, NodeStatus
from runner.results.schema import Verdict
from runner.run.correctness import Answer, Reference, References, RefKey
from runner.run.probing import ProbeEnv, run_probe
from runner.spec.probes import CorrectnessProbe


class Engine:
    """Answers each prompt with its own text and logprobs; the load request whose X-Request-Id
    ends in `-{bad}` gets another text and logprobs (a stale state)."""

    def __init__(self, bad: set[int]) -> None:
        self.bad = bad
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        rid = request.headers["X-Request-Id"]
        body = json.loads(request.content)
        assert body["temperature"] == 0 and body["logprobs"] == 1
        with self.lock:
            self.seen.append(rid)
        wrong = not rid.startswith("gameday-ref-") and int(rid.rsplit("-", 1)[1]) in self.bad
        text, lps = (
            ("runs . the", [-0.5, -0.75]) if wrong else (f"ok {body['prompt']}", [-0.125, -0.25])
        )
        choice = {"text": text, "logprobs": {"token_logprobs": lps}, "finish_reason": "length"}
        return httpx.Response(200, json={"id": f"cmpl-{rid}", "choices": [choice]})


class Lab:
    """One node whose engine is in `generation` (a set_env or set_args restarts it: the next)."""

    def __init__(self, generation: int = 1) -> None:
        self.generation = generation

    def url(self, node: str) -> str:
        return "http://engine"

    def states(self) -> dict[str, NodeState]:
        return {
            "serving": NodeState(
                name="serving",
                status=NodeStatus.RUNNING,
                generation=self.generation,
                incarnation=1,
                restarts=0,
                ready=True,
            )
        }


def probe_with(engine: Engine, **kw: Any) -> tuple[Verdict, str]:
    env = ProbeEnv(
        http=httpx.Client(transport=httpx.MockTransport(engine)),
        lab=cast(LabDriver, Lab()),
        scale=100.0,
        target="serving",
    )
    p = CorrectnessProbe(kind="correctness", prompts=["a", "b"], requests=8, concurrency=4, **kw)
    r = run_probe(env, p)
    return r.verdict, r.observed


def test_a_healthy_engine_passes_after_a_reference_pass_and_the_load() -> None:
    engine = Engine(bad=set())
    verdict, observed = probe_with(engine)
    assert verdict is Verdict.PASSED
    assert observed.startswith(
        "8 requests under load, every answer and logprob as its own serial pass ("
    )
    assert re.search(r"\(cmpl-gameday-ref-\w{8}-0 \.\. cmpl-gameday-ref-\w{8}-1\)$", observed)
    assert len(engine.seen) == 2 + 8
    assert sorted(r.rsplit("-", 1)[1] for r in engine.seen[:2]) == ["0", "1"]
    assert all(r.startswith("gameday-ref-") for r in engine.seen[:2])


def test_divergent_answers_are_named_by_request_id_with_the_logprob_gap() -> None:
    verdict, observed = probe_with(Engine(bad={5, 7}))
    assert verdict is Verdict.FAILED
    head, rest = observed.split("; the first after ")
    assert head == "2 of 8 requests diverged"
    assert rest.startswith("5 requests; cmpl-gameday-")
    for n in (5, 7):
        want = (
            rf"-{n}: 'runs . the' \(reference 'ok a' from cmpl-gameday-ref-\w+-0, logprob gap 0.5\)"
        )
        assert re.search(want, rest)
    assert rest.endswith("; compared with its own serial pass (" + rest.rsplit(" (", 1)[1])


def test_expect_diverges_passes_on_the_faulty_engine_and_fails_on_a_healthy_one() -> None:
    assert probe_with(Engine(bad={3}), expect="diverges")[0] is Verdict.PASSED
    assert probe_with(Engine(bad=set()), expect="diverges")[0] is Verdict.FAILED


def test_an_engine_that_errors_is_a_probe_error_not_a_verdict() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "EngineCore encountered an issue."}})

    env = ProbeEnv(
        http=httpx.Client(transport=httpx.MockTransport(refuse)),
        lab=cast(LabDriver, Lab()),
        scale=100.0,
        target="serving",
    )
    r = run_probe(env, CorrectnessProbe(kind="correctness", requests=2))
    assert r.verdict is Verdict.ERROR
    assert r.observed.startswith("probe error: Server error '500 Internal Server Error'")


def answering(body: Any) -> ProbeEnv:
    def engine(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    return ProbeEnv(
        http=httpx.Client(transport=httpx.MockTransport(engine)),
        lab=cast(LabDriver, Lab()),
        scale=100.0,
        target="serving",
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"choices": ["x"]}, "choices.0"),
        ({"choices": [{"text": "a", "logprobs": [1]}]}, "choices.0.logprobs"),
        ({"choices": []}, "choices"),
        ({"id": "c", "choices": [{"text": 7}]}, "choices.0.text"),
        ([1, 2], "the body (not a JSON object)"),
    ],
)
def test_an_answer_not_in_the_completions_shape_is_a_named_probe_error(
    body: Any, field: str
) -> None:
    r = run_probe(answering(body), CorrectnessProbe(kind="correctness", requests=2))
    assert (r.verdict, r.observed) == (
        Verdict.ERROR,
        f"probe error: answer not in the OpenAI completions shape: {field}",
    )


def test_its_timeout_is_scaled_like_the_other_probes() -> None:
    timeouts: list[float] = []

    def engine(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"]["read"])
        choice = {"text": "ok", "logprobs": {"token_logprobs": [-0.5]}}
        return httpx.Response(200, json={"choices": [choice]})

    env = ProbeEnv(
        http=httpx.Client(transport=httpx.MockTransport(engine)),
        lab=cast(LabDriver, Lab()),
        scale=100.0,
        target="serving",
    )
    probe = CorrectnessProbe(kind="correctness", prompts=["a"], requests=2, timeout_s=300)
    assert run_probe(env, probe).verdict is Verdict.PASSED
    assert timeouts == [3.0, 3.0, 3.0]  # 300 real-world seconds at time scale 100
    short = CorrectnessProbe(kind="correctness", prompts=["a"], requests=1, timeout_s=10)
    timeouts.clear()
    run_probe(env, short)
    assert timeouts == [0.5, 0.5]  # the floor every probe has


# ---- the reference recorded at baseline ----


class Wrong(Engine):
    """An engine that answers every request alike, serial or under load, but not as the
    healthy one did: only a reference from before the fault shows it."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        r = super().__call__(request)
        body = json.loads(r.content)
        body["choices"][0]["text"] = "fluent but wrong"
        return httpx.Response(200, json=body)


def env_with(
    engine: Engine, store: References, *, record: bool = False, generation: int = 1
) -> ProbeEnv:
    return ProbeEnv(
        http=httpx.Client(transport=httpx.MockTransport(engine)),
        lab=cast(LabDriver, Lab(generation)),
        scale=100.0,
        target="serving",
        references=store,
        record_references=record,
    )


PROBE = CorrectnessProbe(kind="correctness", prompts=["a", "b"], requests=8, concurrency=4)
AT = datetime(2026, 12, 1, 10, 31, 2, tzinfo=UTC)


def test_the_baseline_records_a_reference_that_its_load_pass_reproduced() -> None:
    store = References()
    r = run_probe(env_with(Engine(bad=set()), store, record=True), PROBE)
    assert r.verdict is Verdict.PASSED
    assert "as its own serial pass, kept as this run's reference (cmpl-gameday-ref-" in r.observed
    kept = store.get(RefKey("serving", ("a", "b"), 16))
    assert kept is not None and kept.recorded_at is not None
    assert {q: a.text for q, a in kept.answers.items()} == {"a": "ok a", "b": "ok b"}
    assert kept.answers["a"].request_id.startswith("cmpl-gameday-ref-")


def test_a_baseline_whose_load_pass_diverges_records_nothing() -> None:
    store = References()
    r = run_probe(env_with(Engine(bad={3}), store, record=True), PROBE)
    assert r.verdict is Verdict.FAILED
    assert store.get(RefKey.of("serving", PROBE)) is None


def test_later_probes_compare_with_the_recorded_reference_and_send_no_serial_pass() -> None:
    store = References()
    healthy = Engine(bad=set())
    run_probe(env_with(healthy, store, record=True), PROBE)
    kept = store.get(RefKey.of("serving", PROBE))
    assert kept is not None
    store.put(RefKey.of("serving", PROBE), kept, at=AT)
    wrong = Wrong(bad=set())
    r = run_probe(env_with(wrong, store, generation=2), PROBE)  # the injected build
    # its own serial pass would agree with the load: only the baseline's answers show the fault
    assert run_probe(env_with(Wrong(bad=set()), References()), PROBE).verdict is Verdict.PASSED
    assert r.verdict is Verdict.FAILED
    assert r.expected == (
        "every answer and its logprobs as the reference recorded at baseline 2026-12-01 "
        "10:31:02 UTC"
    )
    assert r.observed.startswith("8 of 8 requests diverged; the first after 1 requests; ")
    assert r.observed.endswith(
        f"; compared with the reference recorded at baseline 2026-12-01 10:31:02 UTC "
        f"({kept.answers['a'].request_id} .. {kept.answers['b'].request_id})"
    )
    assert not [rid for rid in wrong.seen if rid.startswith("gameday-ref-")]
    assert len(wrong.seen) == 8


@pytest.mark.parametrize(
    "other",
    [
        {"node": "node1"},
        {"max_tokens": 32},
        {"prompts": ["b", "a"]},
    ],
    ids=["another node", "another length", "other prompts"],
)
def test_a_reference_serves_only_the_same_node_prompts_and_length(other: dict[str, Any]) -> None:
    store = References()
    store.put(
        RefKey.of("serving", PROBE),
        Reference({q: Answer(f"cmpl-x-{q}", "stale", ()) for q in ("a", "b")}),
        at=AT,
    )
    probe = PROBE.model_copy(update=other)
    r = run_probe(env_with(Engine(bad=set()), store), probe)
    assert r.verdict is Verdict.PASSED  # its own serial pass, not the stale store entry
    assert r.expected == "every answer and its logprobs as its own serial pass"


def test_how_many_requests_it_took_counts_every_pass_to_the_same_engine() -> None:
    """A fault that shows only after the engine has served enough requests (a state buffer's
    cursor reaching the wrapping slot) is caught by a later pass: the count is the engine's."""
    store = References()
    key = RefKey.of("serving", PROBE)
    store.put(key, Reference({q: Answer(f"cmpl-r-{q}", f"ok {q}", (-0.125, -0.25)) for q in "ab"}))
    first = run_probe(env_with(Engine(bad=set()), store, generation=2), PROBE)
    assert first.verdict is Verdict.PASSED
    second = run_probe(env_with(Engine(bad={3}), store, generation=2), PROBE)
    assert second.verdict is Verdict.FAILED
    assert (
        "; the first after 3 requests of this pass, 11 of the run's correctness requests to this "
        "engine (8 from earlier probes, 0 from this one's serial pass); "
    ) in second.observed
    # a restarted engine (a new generation) starts the count again
    third = run_probe(env_with(Engine(bad={3}), store, generation=3), PROBE)
    assert "; the first after 3 requests; " in third.observed
