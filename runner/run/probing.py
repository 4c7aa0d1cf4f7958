"""Probes: what a scenario checks about the lab at one moment.

A probe's verdict is passed / failed / error: a probe that could not be made (connection refused,
timeout, Prometheus not answering) is an *error*, not a failure of what it checks, and reports say
which. An inference probe tells a hang (timed out) from an error (refused, 5xx).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import httpx

from runner.errors import GamedayError
from runner.labs.base import LabDriver
from runner.results.schema import Verdict, truncate
from runner.run import correctness
from runner.run import prometheus_api as prometheus
from runner.spec.patterns import compile_user
from runner.spec.probes import (
    AnyProbe,
    CorrectnessProbe,
    GpuProcessesProbe,
    HttpProbe,
    InferenceProbe,
    LogSilenceProbe,
    NodeStateProbe,
    PromQLProbe,
    TargetsProbe,
)
from runner.spec.signature import COMPARE

Probe = AnyProbe
# Characters of an answer or an error body kept as a probe's observation: the report folds a
# long value with a way to expand it, so this bounds a hostile body, not what a person reads.
PROBE_TEXT = 1000


def _body(r: httpx.Response) -> str:
    return truncate(r.text, PROBE_TEXT)


# HTTP's own fixed costs do not scale with the lab: a probe waits at least this long for an
# answer. The lab engine answers an inference probe on loopback in 10-60 ms (its decode time
# scaled), so half a second is ten times that, and a hang costs half a second to show.
MIN_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class ProbeResult:
    name: str
    verdict: Verdict
    expected: str
    observed: str


@dataclass(frozen=True)
class ProbeEnv:
    http: httpx.Client
    lab: LabDriver
    scale: float
    target: str
    since: datetime | None = None  # the injection, for probes about "since then"
    # the run's recorded references; None: each correctness probe makes its own serial pass
    references: correctness.References | None = None
    record_references: bool = False  # the baseline's probes: record, not compare


def describe(p: Probe) -> str:
    if isinstance(p, HttpProbe):
        return f"GET {p.path}" + (f" on {p.node}" if p.node else "")
    if isinstance(p, InferenceProbe):
        return (
            f"inference ({p.api})"
            + (f" on {p.node}" if p.node else "")
            + ("" if p.expect == "completes" else f" {p.expect}")
        )
    if isinstance(p, TargetsProbe):
        return f"Prometheus targets of {p.job}"
    if isinstance(p, CorrectnessProbe):
        return f"correctness under load ({p.requests} requests, {p.concurrency} at a time)"
    if isinstance(p, PromQLProbe):
        return f"PromQL {p.query}"
    if isinstance(p, GpuProcessesProbe):
        return f"GPU processes on {p.node}"
    if isinstance(p, NodeStateProbe):
        return f"state of {p.node}"
    return f"no {p.regex!r} logged on {', '.join(p.nodes)}"


NETWORK_PROBES = (HttpProbe, InferenceProbe, TargetsProbe, PromQLProbe, CorrectnessProbe)


def run_probes(env: ProbeEnv, probes: Sequence[Probe]) -> list[ProbeResult]:
    """Every probe of a set, results in the set's order. The network probes (HTTP, inference,
    Prometheus) run at the same time: a set's wall time is its slowest probe, not the sum of its
    timeouts (a server that accepts but never answers costs one timeout, not one per probe). The
    probes that read the lab (GPU list, node state, logs) run in this thread, one by one."""
    out: dict[int, ProbeResult] = {}
    remote = [i for i, p in enumerate(probes) if isinstance(p, NETWORK_PROBES)]
    if len(remote) > 1:
        with ThreadPoolExecutor(max_workers=len(remote), thread_name_prefix="probe") as pool:
            futures = {i: pool.submit(run_probe, env, probes[i]) for i in remote}
            for i, p in enumerate(probes):
                if i not in futures:
                    out[i] = run_probe(env, p)
            out |= {i: f.result() for i, f in futures.items()}
    else:
        out = {i: run_probe(env, p) for i, p in enumerate(probes)}
    return [out[i] for i in range(len(probes))]


def run_probe(env: ProbeEnv, p: Probe) -> ProbeResult:
    name = describe(p)
    try:
        if isinstance(p, HttpProbe | InferenceProbe):
            return _http(env, p, name)
        if isinstance(p, TargetsProbe):
            return _targets(env, p, name)
        if isinstance(p, CorrectnessProbe):
            return _correct(env, p, name)
        if isinstance(p, PromQLProbe):
            return _promql(env, p, name)
        if isinstance(p, GpuProcessesProbe):
            return _gpu(env, p, name)
        if isinstance(p, NodeStateProbe):
            return _state(env, p, name)
        return _silence(env, p, name)
    except GamedayError as exc:
        return ProbeResult(
            name, Verdict.ERROR, "the probe can be made", f"probe error: {exc.message}"
        )


def _http(env: ProbeEnv, p: HttpProbe | InferenceProbe, name: str) -> ProbeResult:
    base_url = env.lab.url(p.node or env.target)
    timeout = max(p.timeout_s / env.scale, MIN_TIMEOUT_S)
    client = env.http
    if isinstance(p, HttpProbe):
        expected = f"HTTP {p.expect_status}"
        try:
            r = client.get(base_url + p.path, timeout=timeout)
        except httpx.HTTPError as exc:
            return ProbeResult(name, Verdict.ERROR, expected, _err(exc))
        ok = r.status_code == p.expect_status
        return ProbeResult(
            name,
            Verdict.PASSED if ok else Verdict.FAILED,
            expected,
            f"HTTP {r.status_code}",
        )
    want = p.expect_finish_reason.value if p.expect_finish_reason else "any"
    expected = {
        "hangs": f"no answer within {timeout:.1f} s (a hang, not an error)",
        "refused": f"an error answer, HTTP {p.expect_status or '4xx or 5xx'}"
        + (f", its body matching {p.expect_error!r}" if p.expect_error else ""),
        "unavailable": "no completion: nothing answers, it hangs, or it answers an error",
        "completes": f"HTTP 200, non-empty answer, finish_reason {want}",
    }[p.expect]
    try:
        if p.api == "chat":
            body = {
                "messages": [{"role": "user", "content": p.prompt}],
                "max_tokens": p.max_tokens,
                "temperature": p.temperature,
            }
            r = client.post(base_url + "/v1/chat/completions", json=body, timeout=timeout)
        else:
            body = {"prompt": p.prompt, "max_tokens": p.max_tokens, "temperature": p.temperature}
            r = client.post(base_url + "/v1/completions", json=body, timeout=timeout)
    except httpx.TimeoutException as exc:
        verdict = {
            "hangs": Verdict.PASSED,
            "refused": Verdict.FAILED,
            "unavailable": Verdict.PASSED,
        }.get(p.expect, Verdict.ERROR)
        return ProbeResult(name, verdict, expected, _err(exc))
    except httpx.HTTPError as exc:
        # a refusal is an answer: a server that cannot be reached has not refused anything
        verdict = {"completes": Verdict.ERROR, "unavailable": Verdict.PASSED}.get(
            p.expect, Verdict.FAILED
        )
        return ProbeResult(name, verdict, expected, _err(exc))
    if p.expect == "hangs":
        return ProbeResult(
            name,
            Verdict.FAILED,
            expected,
            f"answered HTTP {r.status_code}: {_body(r)}",
        )
    if p.expect == "unavailable":
        ok = r.status_code >= 400
        return ProbeResult(
            name,
            Verdict.PASSED if ok else Verdict.FAILED,
            expected,
            f"HTTP {r.status_code}: {_body(r)}",
        )
    if p.expect == "refused":
        refused = r.status_code == p.expect_status if p.expect_status else r.status_code >= 400
        if p.expect_error is not None:
            refused = refused and compile_user(p.expect_error).search(r.text) is not None
        return ProbeResult(
            name,
            Verdict.PASSED if refused else Verdict.FAILED,
            expected,
            f"HTTP {r.status_code}: {_body(r)}",
        )
    if r.status_code != 200:
        return ProbeResult(name, Verdict.FAILED, expected, f"HTTP {r.status_code}: {_body(r)}")
    try:
        choice = r.json()["choices"][0]
        text = choice["message"]["content"] if p.api == "chat" else choice["text"]
        reason = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, json.JSONDecodeError):
        return ProbeResult(
            name,
            Verdict.FAILED,
            expected,
            f"not an OpenAI completion: {_body(r)}",
        )
    observed = (
        f"HTTP 200, {len(text)} chars, finish_reason {reason}: {truncate(text, PROBE_TEXT)!r}"
    )
    ok = bool(text.strip()) and (
        p.expect_finish_reason is None or reason == p.expect_finish_reason.value
    )
    return ProbeResult(name, Verdict.PASSED if ok else Verdict.FAILED, expected, observed)


def _correct(env: ProbeEnv, p: CorrectnessProbe, name: str) -> ProbeResult:
    """Against the reference the baseline recorded for this node, prompts and length, where
    there is one; otherwise (and at baseline, which records it) against its own serial pass,
    sent just before the load."""
    node = p.node or env.target
    url = env.lab.url(node)
    key = correctness.RefKey.of(node, p)
    store = env.references
    recorded = None if store is None or env.record_references else store.get(key)
    timeout = max(p.timeout_s / env.scale, MIN_TIMEOUT_S)
    source = recorded.source if recorded else correctness.OWN_PASS
    expected = (
        f"every answer and its logprobs as {source}"
        if p.expect == "matches"
        else f"some answer diverges from {source}"
    )
    engine = _engine(env, node) if store is not None else None  # the one the pass will reach
    try:
        checked = correctness.check(env.http, url, p, timeout, recorded)
    except (httpx.HTTPError, ValueError) as exc:  # ValueError: correctness.NotCompletions
        return ProbeResult(name, Verdict.ERROR, expected, f"probe error: {exc}")
    if store is not None and env.record_references and not checked.divergent:
        # only a reference the engine itself reproduced under load is one to keep
        store.put(key, checked.reference)
        source = f"{correctness.OWN_PASS}, kept as this run's reference"
    before = None
    if store is not None and engine is not None:
        before = store.tally(engine, checked.total)
    ok = not checked.divergent if p.expect == "matches" else bool(checked.divergent)
    return ProbeResult(
        name,
        Verdict.PASSED if ok else Verdict.FAILED,
        expected,
        correctness.describe(checked, source, before),
    )


def _engine(env: ProbeEnv, node: str) -> correctness.Engine | None:
    """The node's engine process now; None when the lab cannot say (the count is then this
    pass's alone)."""
    try:
        state = env.lab.states().get(node)
    except GamedayError:
        return None
    if state is None:
        return None
    return correctness.Engine(node, state.generation, state.incarnation)


def _targets(env: ProbeEnv, p: TargetsProbe, name: str) -> ProbeResult:
    url = env.lab.prometheus_url()
    expected = f"up: {', '.join(p.up) or '-'}; down: {', '.join(p.down) or '-'}"
    if url is None:
        return ProbeResult(name, Verdict.ERROR, expected, "this lab has no Prometheus")
    got = prometheus.targets(env.http, url, p.job)
    observed = "; ".join(
        f"{n} {t['health']}"
        + (f" ({truncate(t['lastError'], PROBE_TEXT)})" if t["lastError"] else "")
        for n, t in sorted(got.items())
    )
    ok = all(got.get(n, {}).get("health") == "up" for n in p.up) and all(
        got.get(n, {}).get("health") == "down" for n in p.down
    )
    return ProbeResult(
        name, Verdict.PASSED if ok else Verdict.FAILED, expected, observed or "no targets"
    )


def _promql(env: ProbeEnv, p: PromQLProbe, name: str) -> ProbeResult:
    url = env.lab.prometheus_url()
    expected = f"{p.op} {p.value:g}" + (" (no data passes)" if p.no_data == "pass" else "")
    if url is None:
        return ProbeResult(name, Verdict.ERROR, expected, "this lab has no Prometheus")
    values = prometheus.query(env.http, url, p.query)
    if not values:
        ok = p.no_data == "pass"
        return ProbeResult(name, Verdict.PASSED if ok else Verdict.FAILED, expected, "no data")
    ok = bool(COMPARE[p.op](values[0], p.value))
    return ProbeResult(
        name,
        Verdict.PASSED if ok else Verdict.FAILED,
        expected,
        f"{values[0]:g}" + (f" (and {len(values) - 1} more)" if len(values) > 1 else ""),
    )


def _gpu(env: ProbeEnv, p: GpuProcessesProbe, name: str) -> ProbeResult:
    procs = env.lab.gpu_processes(p.node)
    observed = ", ".join(f"{x.name} {x.mib} MiB (pid {x.pid})" for x in procs) or "none"
    expected = ", ".join(m.name for m in p.present) + (" and nothing else" if p.only else "")
    matched: set[int] = set()
    ok = True
    for m in p.present:
        hit = [
            x
            for x in procs
            if compile_user(m.name).search(x.name)
            and (m.min_mib is None or x.mib >= m.min_mib)
            and (m.max_mib is None or x.mib <= m.max_mib)
        ]
        ok &= bool(hit)
        matched |= {x.pid for x in hit}
    if p.only:
        ok &= all(x.pid in matched for x in procs)
    return ProbeResult(
        name,
        Verdict.PASSED if ok else Verdict.FAILED,
        expected or "no GPU process",
        observed,
    )


def _state(env: ProbeEnv, p: NodeStateProbe, name: str) -> ProbeResult:
    st = env.lab.states()[p.node]
    code = st.last_exit.code if st.last_exit else None
    expected = (
        p.status.value
        + (f", exit code {p.exit_code}" if p.exit_code is not None else "")
        + (f", restarts <= {p.max_restarts}" if p.max_restarts is not None else "")
    )
    observed = f"{st.status.value}, restarts {st.restarts}" + (
        f", last exit code {code}" if code is not None else ""
    )
    ok = (
        st.status is p.status
        and (p.exit_code is None or code == p.exit_code)
        and (p.max_restarts is None or st.restarts <= p.max_restarts)
    )
    return ProbeResult(name, Verdict.PASSED if ok else Verdict.FAILED, expected, observed)


def _silence(env: ProbeEnv, p: LogSilenceProbe, name: str) -> ProbeResult:
    rx = compile_user(p.regex)
    hits = []
    for node in p.nodes:
        for ln in env.lab.logs_since(node, env.since):
            if rx.search(ln.text):
                hits.append(f"{node}: {ln.text[:160]}")
    expected = f"no line matching /{p.regex}/ since the injection"
    return ProbeResult(
        name,
        Verdict.FAILED if hits else Verdict.PASSED,
        expected,
        "; ".join(hits[:3]) if hits else "silence",
    )


def _err(exc: httpx.HTTPError) -> str:
    kind = type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"probe error: connection refused ({kind})"
    if isinstance(exc, httpx.TimeoutException):
        return f"probe error: timed out, a hang ({kind})"
    return f"probe error: {kind}: {exc}"
