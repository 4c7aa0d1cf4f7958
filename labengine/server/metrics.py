"""vLLM's Prometheus metrics (the `vllm:` names a dashboard or an alert rule reads) and the
periodic throughput line the API server logs."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

# what `GET /metrics` answers with (Prometheus' text exposition format)
CONTENT_TYPE = "text/plain; version=0.0.4"


class EngineMetrics:
    """One engine's metrics in its own registry, labelled as vLLM labels them (model_name,
    engine), with the token totals the throughput line is computed from."""

    def __init__(self, served_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        reg = self.registry
        self._running = Gauge(
            "vllm:num_requests_running",
            "Requests in model execution batches.",
            labels,
            registry=reg,
        )
        self._waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting to be processed.", labels, registry=reg
        )
        self._kv_usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            labels,
            registry=reg,
        )
        self._prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg
        )
        self._gen_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=reg
        )
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=reg,
        )
        self._lv = {"model_name": served_name, "engine": "0"}
        for g in (self._running, self._waiting, self._kv_usage):
            g.labels(**self._lv).set(0)
        self.kv_usage = 0.0  # the gauge's value, for the throughput line
        self.prompt_total = 0
        self.gen_total = 0

    def started(self, kv_usage: float) -> None:
        """A request enters the running batch; the KV cache is `kv_usage` (0..1) full."""
        self._running.labels(**self._lv).inc()
        self.set_kv_usage(kv_usage)

    def left(self) -> None:
        """A request leaves the running batch (finished, failed or abandoned)."""
        self._running.labels(**self._lv).dec()

    def set_kv_usage(self, fraction: float) -> None:
        self.kv_usage = fraction
        self._kv_usage.labels(**self._lv).set(fraction)

    def finished(self, prompt_tokens: int, gen_tokens: int, reason: str) -> None:
        """A request completed: its tokens, and its finish reason (stop, length)."""
        self._prompt_tokens.labels(**self._lv).inc(prompt_tokens)
        self._gen_tokens.labels(**self._lv).inc(gen_tokens)
        self._success.labels(**self._lv, finished_reason=reason).inc()
        self.prompt_total += prompt_tokens
        self.gen_total += gen_tokens

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def throughput_line(prompt_tps: float, gen_tps: float, running: int, kv_usage: float) -> str:
    """vLLM's periodic stats line (loggers.py), as it prints it."""
    return (
        f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation "
        f"throughput: {gen_tps:.1f} tokens/s, Running: {running} reqs, Waiting: 0 "
        f"reqs, GPU KV cache usage: {kv_usage * 100:.1f}%, "
        "Prefix cache hit rate: 0.0%"
    )
