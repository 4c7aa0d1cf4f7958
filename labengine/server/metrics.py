"""vLLM's Prometheus metrics (the `vllm:` names a dashboard or an alert rule reads) and the
periodic throughput line the API server logs.

The families, their help texts, labels and buckets are those vLLM 0.33's v1 engine registers
with its default settings (vllm/v1/metrics/loggers.py, PrometheusStatLogger; the buckets from
vllm/v1/metrics/buckets.py). Their values follow what the lab engine did: the requests it served,
their tokens, and the times the API server measured for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# what `GET /metrics` answers with (Prometheus' text exposition format)
CONTENT_TYPE = "text/plain; version=0.0.4"

# vllm/v1/metrics/buckets.py
REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TIME_TO_FIRST_TOKEN = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
INTER_TOKEN_LATENCY = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                       5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)
# vllm/v1/engine/__init__.py FINISH_REASON_STRINGS: every reason's series exists from the start
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")  # stats.py
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")  # cache_hit_source
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")


def request_token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... up to the window."""
    out: list[int] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_model_len:
                return tuple(out)
            out.append(v)
        exp += 1


@dataclass(frozen=True)
class RequestTimes:
    """One finished request as the API server saw it (monotonic seconds)."""

    arrival: float
    scheduled: float
    first_token: float
    token_gaps: tuple[float, ...]
    end: float


class EngineMetrics:
    """One engine's metrics in its own registry, labelled as vLLM labels them (model_name,
    engine), with the token totals the throughput line is computed from."""

    def __init__(
        self,
        served_name: str,
        max_model_len: int = 4096,
        cache_info: dict[str, str] | None = None,
        max_num_seqs: int = 256,
    ) -> None:
        self.registry = reg = CollectorRegistry()
        self.max_num_seqs = max_num_seqs
        self.in_flight = 0
        lv = ["model_name", "engine"]
        self._lv = {"model_name": served_name, "engine": "0"}

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, [*lv, *extra], registry=reg)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*lv, *extra], registry=reg)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, lv, buckets=buckets, registry=reg)

        self._running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self._waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self._waiting_by = waiting_by = gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            ("reason",),
        )
        self._sleep = gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; "
            "awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; "
            "discard_all = 1 means sleep level 2.",
            ("sleep_state",),
        )
        self._kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self._pc_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self._pc_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        ext_q = counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in "
            "terms of number of queried tokens.",
        )
        ext_h = counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms "
            "of number of cached tokens.",
        )
        mm_q = counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        )
        mm_h = counter(
            "vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."
        )
        preempt = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self._prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self._by_source = counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", ("source",)
        )
        cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        cached_by = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            ("source",),
        )
        self._gen_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self._success = counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("finished_reason",),
        )
        admission = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=reg,
        )
        tok = tuple(float(b) for b in request_token_buckets(max_model_len))
        self._h_prompt = hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok
        )
        self._h_gen = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tok
        )
        self._h_iter = hist(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKENS,
        )
        self._h_max_gen = hist(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tok,
        )
        self._h_n = hist(
            "vllm:request_params_n", "Histogram of the n request parameter.", REQUEST_PARAMS_N
        )
        self._h_max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tok
        )
        self._h_ttft = hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN,
        )
        self._h_itl = hist(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY,
        )
        self._h_tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            INTER_TOKEN_LATENCY,
        )
        self._h_e2e = hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY,
        )
        self._h_queue = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY,
        )
        self._h_infer = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY,
        )
        self._h_prefill = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY,
        )
        self._h_decode = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY,
        )
        self._h_preempt = hist(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            REQUEST_NUM_PREEMPTIONS,
        )
        self._h_kv_computed = hist(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tok,
        )
        # vLLM creates every labelled series up front: a scrape shows each family at once
        for metric in (self._running, self._waiting, self._kv_usage, self._pc_queries,
                       self._pc_hits, ext_q, ext_h, mm_q, mm_h, preempt, self._prompt_tokens,
                       cached, self._gen_tokens, self._h_prompt, self._h_gen, self._h_iter,
                       self._h_max_gen, self._h_n, self._h_max_tokens, self._h_ttft, self._h_itl,
                       self._h_tpot, self._h_e2e, self._h_queue, self._h_infer, self._h_prefill,
                       self._h_decode, self._h_preempt, self._h_kv_computed):  # fmt: skip
            metric.labels(**self._lv)
        for reason in WAITING_REASONS:
            waiting_by.labels(**self._lv, reason=reason)
        for source in PROMPT_SOURCES:
            self._by_source.labels(**self._lv, source=source)
        for source in CACHE_HIT_SOURCES:
            cached_by.labels(**self._lv, source=source)
        for reason in FINISH_REASONS:
            self._success.labels(**self._lv, finished_reason=reason)
        for reason in ADMISSION_REASONS:
            admission.labels(model_name=served_name, reason=reason)
        if cache_info is not None:
            info = Gauge(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                [*cache_info, "engine"],
                registry=reg,
            )
            info.labels(**cache_info, engine="0").set(1)
        self.set_sleep_level(None)
        self.kv_usage = 0.0  # the gauge's value, for the throughput line
        self.prompt_total = 0
        self.gen_total = 0

    def started(self, kv_usage: float) -> None:
        """A request arrives; the KV cache is `kv_usage` (0..1) full."""
        self.in_flight += 1
        self._set_queues()
        self.set_kv_usage(kv_usage)

    def left(self) -> None:
        """A request leaves (finished, failed or abandoned)."""
        self.in_flight -= 1
        self._set_queues()

    def queue_sizes(self) -> tuple[int, int]:
        """(running, waiting), as the scheduler has them."""
        running = min(self.in_flight, self.max_num_seqs)
        return running, self.in_flight - running

    def _set_queues(self) -> None:
        """The scheduler runs at most max_num_seqs requests; the rest wait for capacity
        (vllm/v1/core/sched/scheduler.py: the running list is capped at max_num_running_reqs)."""
        running, waiting = self.queue_sizes()
        self._running.labels(**self._lv).set(running)
        self._waiting.labels(**self._lv).set(waiting)
        self._waiting_by.labels(**self._lv, reason="capacity").set(waiting)

    def set_kv_usage(self, fraction: float) -> None:
        self.kv_usage = fraction
        self._kv_usage.labels(**self._lv).set(fraction)

    def set_sleep_level(self, level: int | None) -> None:
        """vLLM's record_sleep_state: awake, or asleep at level 1 or 2."""
        states = {
            "awake": level is None,
            "weights_offloaded": level == 1,
            "discard_all": level == 2,
        }
        for state, on in states.items():
            self._sleep.labels(**self._lv, sleep_state=state).set(int(on))

    def received(self, n: int, max_tokens: int) -> None:
        """A request's parameters, once per request whatever its `n`."""
        self._h_n.labels(**self._lv).observe(n)
        self._h_max_tokens.labels(**self._lv).observe(max_tokens)

    def finished(
        self,
        prompt_tokens: int,
        gen_tokens: int,
        reason: str,
        max_tokens: int | None = None,
        times: RequestTimes | None = None,
    ) -> None:
        """A request completed: its tokens, its finish reason (stop, length), and (when the API
        server timed it) its latencies. Prefix caching finds nothing: every prompt is computed."""
        lv = self._lv
        self._prompt_tokens.labels(**lv).inc(prompt_tokens)
        self._gen_tokens.labels(**lv).inc(gen_tokens)
        self._success.labels(**lv, finished_reason=reason).inc()
        self._pc_queries.labels(**lv).inc(prompt_tokens)
        self._by_source.labels(**lv, source="local_compute").inc(prompt_tokens)
        self.prompt_total += prompt_tokens
        self.gen_total += gen_tokens
        self._h_prompt.labels(**lv).observe(prompt_tokens)
        self._h_kv_computed.labels(**lv).observe(prompt_tokens)
        self._h_gen.labels(**lv).observe(gen_tokens)
        self._h_iter.labels(**lv).observe(prompt_tokens)
        for _ in range(max(gen_tokens - 1, 0)):
            self._h_iter.labels(**lv).observe(1)
        self._h_preempt.labels(**lv).observe(0)
        if max_tokens is not None:
            self._h_max_gen.labels(**lv).observe(max_tokens)
        if times is not None:
            self._observe_times(gen_tokens, times)

    def _observe_times(self, gen_tokens: int, t: RequestTimes) -> None:
        lv = self._lv
        self._h_ttft.labels(**lv).observe(t.first_token - t.arrival)
        for gap in t.token_gaps:
            self._h_itl.labels(**lv).observe(gap)
        if gen_tokens > 1:
            self._h_tpot.labels(**lv).observe((t.end - t.first_token) / (gen_tokens - 1))
        self._h_e2e.labels(**lv).observe(t.end - t.arrival)
        self._h_queue.labels(**lv).observe(t.scheduled - t.arrival)
        self._h_infer.labels(**lv).observe(t.end - t.scheduled)
        self._h_prefill.labels(**lv).observe(t.first_token - t.scheduled)
        self._h_decode.labels(**lv).observe(t.end - t.first_token)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def throughput_line(
    prompt_tps: float, gen_tps: float, running: int, kv_usage: float, waiting: int = 0
) -> str:
    """vLLM's periodic stats line (loggers.py), as it prints it."""
    return (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation "
        f"throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} "
        f"reqs, GPU KV cache usage: {kv_usage * 100:.1f}%, "
        "Prefix cache hit rate: 0.0%"
    )
