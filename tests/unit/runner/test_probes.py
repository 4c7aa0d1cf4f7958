"""Probe sets: the network probes of one set run at the same time, results in the set's order."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest

from runner.labs.base import LabDriver
from runner.results.schema import Verdict
from runner.run.probing import MIN_TIMEOUT_S, ProbeEnv, run_probes
from runner.spec.probes import HttpProbe, InferenceProbe, LogSilenceProbe


class SilentServer:
    """Accepts connections and never answers: a vLLM whose socket is bound before its engine
    is up (a head waiting for its workers)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()
        return f"http://{host}:{port}"


class UrlOnly:
    def __init__(self, url: str) -> None:
        self._url = url
        self.read_logs = 0

    def url(self, node: str) -> str:
        return self._url

    def logs_since(self, node: str, since: Any) -> list[Any]:
        self.read_logs += 1
        return []


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    s = SilentServer()
    yield s
    s.sock.close()


def test_a_set_of_hanging_probes_costs_one_timeout(silent: SilentServer) -> None:
    lab = UrlOnly(silent.url)
    probes = [
        HttpProbe(kind="http", path="/health"),
        InferenceProbe(kind="inference", prompt="one"),
        LogSilenceProbe(kind="log_silence", nodes=["serving"], regex="x"),
        InferenceProbe(kind="inference", prompt="two", expect="hangs"),
    ]
    with httpx.Client() as http:
        env = ProbeEnv(http=http, lab=cast(LabDriver, lab), scale=100, target="serving")
        t0 = time.monotonic()
        results = run_probes(env, probes)
        wall = time.monotonic() - t0
    # three network probes of MIN_TIMEOUT_S each: one timeout's wall time, not three
    assert MIN_TIMEOUT_S <= wall < 2 * MIN_TIMEOUT_S, wall
    assert [r.name for r in results] == [
        "GET /health",
        "inference (chat)",
        "no 'x' logged on serving",
        "inference (chat) hangs",
    ]
    assert [r.verdict for r in results] == [
        Verdict.ERROR,  # no answer: the probe could not be made
        Verdict.ERROR,
        Verdict.PASSED,  # the log probe ran too, in the caller's thread
        Verdict.PASSED,  # a hang was what it expected
    ]
    assert lab.read_logs == 1


def answering(status: int, body: dict[str, Any]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(status, json=body)))


PAUSED = {
    "error": {
        "message": "Generation is paused. Please retry after it resumes.",
        "type": "ServiceUnavailableError",
        "param": None,
        "code": 503,
    }
}
COMPLETION = {"choices": [{"message": {"content": "Hello."}, "finish_reason": "stop"}]}


@pytest.mark.parametrize(
    ("status", "body", "expect_status", "verdict"),
    [
        (503, PAUSED, 503, Verdict.PASSED),
        (503, PAUSED, None, Verdict.PASSED),
        (500, PAUSED, 503, Verdict.FAILED),
        (200, COMPLETION, 503, Verdict.FAILED),
        (200, COMPLETION, None, Verdict.FAILED),
    ],
)
def test_a_refused_inference(
    status: int, body: dict[str, Any], expect_status: int | None, verdict: Verdict
) -> None:
    probe = InferenceProbe(
        kind="inference", prompt="hi", expect="refused", expect_status=expect_status
    )
    with answering(status, body) as http:
        env = ProbeEnv(http=http, lab=cast(LabDriver, UrlOnly("http://lab")), scale=1, target="s")
        (result,) = run_probes(env, [probe])
    assert result.name == "inference (chat) refused"
    assert result.verdict is verdict
    assert result.expected == f"an error answer, HTTP {expect_status or '4xx or 5xx'}"
    assert result.observed.startswith(f"HTTP {status}: ")


def test_a_refusal_needs_an_answer(silent: SilentServer) -> None:
    url = silent.url
    silent.sock.close()  # nothing listens: connection refused, which is not the engine refusing
    probe = InferenceProbe(kind="inference", prompt="hi", expect="refused", expect_status=503)
    with httpx.Client() as http:
        env = ProbeEnv(http=http, lab=cast(LabDriver, UrlOnly(url)), scale=1, target="s")
        (result,) = run_probes(env, [probe])
    assert result.verdict is Verdict.FAILED


def test_expect_status_goes_with_refused() -> None:
    with pytest.raises(ValueError, match="expect_status goes with `expect: refused`"):
        InferenceProbe(kind="inference", prompt="hi", expect_status=503)


@pytest.mark.parametrize(
    ("status", "body", "verdict", "observed"),
    [
        (503, PAUSED, Verdict.PASSED, "HTTP 503: "),
        (500, PAUSED, Verdict.PASSED, "HTTP 500: "),
        (200, COMPLETION, Verdict.FAILED, "HTTP 200: "),
    ],
)
def test_an_unavailable_inference_answered(
    status: int, body: dict[str, Any], verdict: Verdict, observed: str
) -> None:
    probe = InferenceProbe(kind="inference", prompt="hi", expect="unavailable")
    with answering(status, body) as http:
        env = ProbeEnv(http=http, lab=cast(LabDriver, UrlOnly("http://lab")), scale=1, target="s")
        (result,) = run_probes(env, [probe])
    assert result.name == "inference (chat) unavailable"
    assert result.verdict is verdict
    assert result.expected == "no completion: nothing answers, it hangs, or it answers an error"
    assert result.observed.startswith(observed)


def test_nothing_listening_is_unavailable(silent: SilentServer) -> None:
    url = silent.url
    silent.sock.close()
    probe = InferenceProbe(kind="inference", prompt="hi", expect="unavailable")
    with httpx.Client() as http:
        env = ProbeEnv(http=http, lab=cast(LabDriver, UrlOnly(url)), scale=1, target="s")
        (result,) = run_probes(env, [probe])
    assert result.verdict is Verdict.PASSED
    assert "connection refused" in result.observed


NO_TEMPLATE = {
    "error": {
        "message": "As of transformers v4.44, default chat template is no longer allowed, so you "
        "must provide a chat template if the tokenizer does not define one.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}


@pytest.mark.parametrize(
    ("body", "verdict"), [(NO_TEMPLATE, Verdict.PASSED), (TOO_LONG, Verdict.FAILED)]
)
def test_a_refusal_with_its_error(body: dict[str, Any], verdict: Verdict) -> None:
    """Only the refusal the scenario names passes: another 400 is another failure."""
    probe = InferenceProbe(
        kind="inference",
        prompt="hi",
        expect="refused",
        expect_status=400,
        expect_error="default chat template is no longer allowed",
    )
    with answering(400, body) as http:
        env = ProbeEnv(http=http, lab=cast(LabDriver, UrlOnly("http://lab")), scale=1, target="s")
        (result,) = run_probes(env, [probe])
    assert result.verdict is verdict
    assert result.expected == (
        "an error answer, HTTP 400, its body matching 'default chat template is no longer allowed'"
    )


def test_expect_error_goes_with_refused_and_compiles() -> None:
    with pytest.raises(ValueError, match="expect_error goes with `expect: refused`"):
        InferenceProbe(kind="inference", prompt="hi", expect_error="x")
    with pytest.raises(ValueError, match="RE2"):
        InferenceProbe(kind="inference", prompt="hi", expect="refused", expect_error=r"(a)\1")
