"""A request that reaches the engine client after its engine core died fails at once, as vLLM's
AsyncLLM.add_request raises EngineDeadError once errored: it must not wait on a queue the dead
engine's ("dead",) broadcast never reached (the API server's shutdown would wait on it)."""

from __future__ import annotations

import asyncio
import io
from multiprocessing import Pipe
from typing import cast

import pytest

from labengine.logs import VllmLog
from labengine.server.state import EngineDead, ServerState, generate
from vllmfacts.wording import Era


def test_a_request_after_the_engine_died_fails_without_being_sent() -> None:
    ours, theirs = Pipe()
    st = ServerState(
        era=Era.V0_19,
        served_name="m",
        model_root="/m",
        max_model_len=4096,
        kv_tokens=1024,
        conn=ours,
        log=cast(VllmLog, io.StringIO()),
        keep_alive_on_death=False,
        stats_interval_s=10.0,
        dead=True,
    )

    async def first() -> object:
        return await anext(generate(st, "hi", 2, 8))

    with pytest.raises(EngineDead):
        asyncio.run(asyncio.wait_for(first(), 5))
    assert st.queues == {}
    assert not theirs.poll()  # nothing was sent to the dead engine core
