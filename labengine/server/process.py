"""The API server process's serving half: vLLM's OpenAI-compatible routes on uvicorn.

Generation goes to the engine-core process over a pipe. If that process dies, the server does
what vLLM does: logs the engine-dead errors, answers /health with 503 and requests with 500, shuts
uvicorn down gracefully and exits 0 (vLLM issue 48966) unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn
from starlette.applications import Starlette

from labengine.logs import VllmLog
from labengine.server.metrics import throughput_line
from labengine.server.routes import Api
from labengine.server.state import ServerState
from labengine.sites import Site, where
from labengine.tracebacks import Traceback, frames
from vllmfacts.wording import Era

# how often a shutting-down server asks its connections to close once idle (wall seconds)
SHUTDOWN_ASK_S = 0.05


def build_app(st: ServerState) -> Starlette:
    return Starlette(routes=Api(st).routes())


def engine_idle(rates: tuple[float, float], before: tuple[float, float]) -> bool:
    """vLLM's LoggingStatLogger logs its line at DEBUG, so not at all by default, when neither
    this interval nor the one before made a token (vllm/v1/metrics/loggers.py, _update_stats and
    log: `log_fn = logger.debug if self.engine_is_idle else logger.info`). Requests waiting on an
    engine that makes no progress do not count: a hung engine goes quiet after one line."""
    return not any((*rates, *before))


async def stats_loop(st: ServerState) -> None:
    """vLLM's throughput line every stats interval, unless the engine is idle."""
    m = st.metrics
    last_prompt, last_gen = m.prompt_total, m.gen_total
    before = (0.0, 0.0)
    while True:
        await asyncio.sleep(st.stats_interval_s)
        dt = st.stats_interval_s
        p = (m.prompt_total - last_prompt) / dt
        g = (m.gen_total - last_gen) / dt
        last_prompt, last_gen = m.prompt_total, m.gen_total
        idle = engine_idle((p, g), before)
        before = (p, g)
        if not idle:
            running, waiting = m.queue_sizes()
            st.log.info(
                where(st.era, Site.STATS), throughput_line(p, g, running, m.kv_usage, waiting)
            )


def _on_engine_output(st: ServerState) -> None:
    try:
        item = st.conn.recv()
    except (EOFError, OSError):
        _engine_died(st)
        return
    q = st.queues.get(item[1])
    if q is not None:
        q.put_nowait(item)


def _engine_died(st: ServerState) -> None:
    loop = asyncio.get_running_loop()
    loop.remove_reader(st.conn.fileno())
    if st.dead:
        return
    st.dead = True
    if st.era is Era.V0_19:
        st.log.error(
            where(st.era, Site.ENGINE_PROC_DIED),
            "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
        )
    # vllm/v1/engine/async_llm.py, output_handler: `logger.exception("AsyncLLM output_handler
    # failed.")`, so the traceback is the record's and every line carries its head (real
    # vLLM 0.32 on the CPU logs it so: "ERROR ... [async_llm.py:906] vllm.v1.engine.exceptions.
    # EngineDeadError: ...")
    st.log.logged_exception(
        where(st.era, Site.OUTPUT_HANDLER_FAILED),
        "AsyncLLM output_handler failed.",
        frames(st.era, Traceback.ENGINE_DEAD),
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    )
    for q in st.queues.values():
        q.put_nowait(("dead",))
    if not st.keep_alive_on_death and st.server is not None:
        st.server.should_exit = True


class _UvicornFormatter(logging.Formatter):
    """uvicorn's own lines (`INFO:     Started server process [1]`), in uvicorn's default
    format: behind vLLM's prefix where vLLM decorates stdout itself (0.19), bare where only its
    own log records carry the prefix (0.33; real vLLM 0.32.0 prints them so)."""

    def __init__(self, log: VllmLog) -> None:
        super().__init__()
        self.log = log

    def format(self, record: logging.LogRecord) -> str:
        level = (record.levelname + ":").ljust(9)
        prefix = self.log.prefix if self.log.era is Era.V0_19 else ""
        return "\n".join(prefix + level + " " + line for line in record.getMessage().splitlines())


class _Server(uvicorn.Server):
    """uvicorn's server, whose graceful shutdown also closes the connections made after it
    began. uvicorn asks the connections it has at the start to close once idle; one accepted as
    the listener closed is made a moment later (asyncio creates its protocol in a task), serves
    its request, and then sits out its keep-alive: 5 s of wall time, 500 s of a x100 lab, with
    the server process still alive after its engine died. vLLM's own server subclasses it too
    (vllm/entrypoints/launchers/launcher.py, its accept tasks cancelled before shutdown)."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        async def ask_late_ones() -> None:
            while True:
                await asyncio.sleep(SHUTDOWN_ASK_S)
                for conn in list(self.server_state.connections):
                    if not conn.transport.is_closing():
                        conn.shutdown()

        late = asyncio.create_task(ask_late_ones())
        try:
            await super().shutdown(sockets)
        finally:
            late.cancel()


def serve(st: ServerState, sock: socket.socket, host: str, port: int) -> None:
    app = build_app(st)
    handler = logging.StreamHandler(st.log.stream)
    handler.setFormatter(_UvicornFormatter(st.log))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.propagate = False
        lg.setLevel(logging.INFO)
    config = uvicorn.Config(
        app, log_config=None, access_log=True, lifespan="on", timeout_graceful_shutdown=5
    )
    server = _Server(config)
    st.server = server

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(st.conn.fileno(), _on_engine_output, st)
        stats = asyncio.create_task(stats_loop(st))
        await server.serve(sockets=[sock])
        stats.cancel()

    asyncio.run(main())
