"""What the API server process knows, and a request's trip to the engine core and back.

Generation goes over a pipe: ("gen", rid, prompt, prompt_tokens, max_tokens, choice index,
kv_transfer_params) out, then
("tok", rid, text)*, ("kv", rid, kv_transfer_params) from a prefill engine, and
("end", rid, finish_reason, n) back, routed to the request's queue by
rid; ("dead",) on every queue when the engine core has died.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import uvicorn

from labengine.logs import VllmLog
from labengine.server.metrics import EngineMetrics, RequestTimes
from vllmfacts.wording import Era


class EngineDead(Exception):
    """The engine core died while a request waited for it."""


@dataclass
class ServerState:
    era: Era
    served_name: str
    model_root: str
    max_model_len: int
    kv_tokens: int
    conn: Connection
    log: VllmLog
    keep_alive_on_death: bool
    stats_interval_s: float
    time_scale: float = 1.0
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE: the /sleep, /wake_up, /is_sleeping routes
    dead: bool = False
    sleeping: int | None = None  # the sleep level while asleep (0: the scheduler paused only)
    queues: dict[str, asyncio.Queue[tuple[Any, ...]]] = field(default_factory=dict)
    last_end: float = 0.0  # when the engine core last ended a request (monotonic seconds)
    ids: itertools.count[int] = field(default_factory=itertools.count)
    server: uvicorn.Server | None = None
    max_num_seqs: int = 256  # the scheduler's running cap: the rest of the requests wait
    max_logprobs: int = 20  # --max-logprobs; -1: the vocabulary
    vocab_size: int = 0  # the model config's, what `logprobs: -1` stands for
    cache_info: dict[str, str] | None = None  # the labels of vllm:cache_config_info
    chat_template: bool = True  # --chat-template or the tokenizer's: without, chat answers 400
    metrics: EngineMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = EngineMetrics(
            self.served_name, self.max_model_len, self.cache_info, self.max_num_seqs
        )


async def generate(
    st: ServerState,
    prompt: str,
    n_prompt: int,
    max_tokens: int,
    index: int = 0,
    kv_params: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Any, ...]]:
    """The engine core's ("tok", ...) items then its ("end", ...) item for choice `index` of one
    request. Raises EngineDead if the engine core dies first.

    The engine core serves the pipe's requests one after the other: a request is scheduled when
    the one sent before it has ended, which is what its queue time measures."""
    rid = f"req-{next(st.ids)}"
    q: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
    ahead = bool(st.queues)
    if st.dead:
        # a request that read its body while the engine core died comes after the ("dead",)
        # every queue was sent: it must fail now, not wait on a queue nobody fills (vLLM's
        # AsyncLLM.add_request raises EngineDeadError once the client has errored,
        # vllm/v1/engine/async_llm.py:307 in 0.19.1)
        raise EngineDead
    st.queues[rid] = q
    st.metrics.started(min(1.0, (n_prompt + max_tokens) / max(st.kv_tokens, 1)))
    arrival = time.monotonic()
    stamps: list[float] = []
    try:
        st.conn.send(("gen", rid, prompt, n_prompt, max_tokens, index, kv_params))
        while True:
            item = await q.get()
            if item[0] == "dead":
                raise EngineDead
            now = time.monotonic()
            yield item
            if item[0] == "tok":
                stamps.append(now)
            if item[0] == "end":
                first = stamps[0] if stamps else now
                times = RequestTimes(
                    arrival=arrival,
                    scheduled=min(first, max(arrival, st.last_end)) if ahead else arrival,
                    first_token=first,
                    token_gaps=tuple(b - a for a, b in itertools.pairwise(stamps)),
                    end=now,
                )
                st.last_end = now
                st.metrics.finished(n_prompt, item[3], item[2], max_tokens, times)
                return
    finally:
        st.queues.pop(rid, None)
        st.metrics.left()
        if not st.queues:
            st.metrics.set_kv_usage(0)
