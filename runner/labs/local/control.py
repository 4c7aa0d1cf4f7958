"""The supervisor's control API (HTTP over its unix socket), one handler per route. The local
driver (runner.labs.local.driver) is its only client; the routes and their answers are the
protocol between the two."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from runner.labs.lifecycle import EventType

if TYPE_CHECKING:
    from runner.labs.local.supervisor import Supervisor


class ControlApi:
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/status", self.status),
                Route("/nodes/{node}/config", self.config, methods=["GET", "PUT"]),
                Route("/restart", self.restart, methods=["POST"]),
                Route("/nodes/{node}/stop", self.stop_node, methods=["POST"]),
                Route("/nodes/{node}/start", self.start_node, methods=["POST"]),
                Route("/nodes/{node}/logs", self.logs),
                Route("/nodes/{node}/aux", self.aux, methods=["GET", "POST", "DELETE"]),
                Route("/nodes/{node}/signal", self.signal_node, methods=["POST"]),
                Route("/events", self.events),
                Route("/shutdown", self.shutdown, methods=["POST"]),
            ]
        )

    async def status(self, _: Request) -> Response:
        sup = self.sup
        return JSONResponse(
            {
                "pid": os.getpid(),
                "scale": sup.scale,
                "last_seq": len(sup.events),
                "nodes": {k: n.snapshot() for k, n in sup.nodes.items()},
                "aux": {
                    owner: {k: a.snapshot() for k, a in procs.items()}
                    for owner, procs in sup.aux.items()
                },
            }
        )

    async def config(self, request: Request) -> Response:
        """GET: the node's args and env; PUT: apply new ones (a new generation)."""
        n = self.sup.nodes[request.path_params["node"]]
        if request.method == "PUT":
            body = await request.json()
            await self.sup.stop(n)
            n.args = list(body["args"])
            n.env = dict(body["env"])
            n.generation += 1
            n.restarts = 0
            await self.sup.emit(n.name, EventType.APPLIED, generation=n.generation)
            self.sup.start_loop(n)
        return JSONResponse({"args": n.args, "env": n.env})

    async def restart(self, request: Request) -> Response:
        """Stop the nodes together, then start them together, each in a new generation."""
        body = await request.json()
        nodes = [self.sup.nodes[x] for x in body["nodes"]]
        await asyncio.gather(*(self.sup.stop(n) for n in nodes))
        for n in nodes:
            n.generation += 1
            n.restarts = 0
        for n in nodes:
            self.sup.start_loop(n)
        return JSONResponse({"restarted": [n.name for n in nodes]})

    async def stop_node(self, request: Request) -> Response:
        """Stop the node and keep it stopped: no restart policy acts until it is started."""
        n = self.sup.nodes[request.path_params["node"]]
        await self.sup.stop(n)
        self.sup.persist(n)
        return JSONResponse(n.snapshot())

    async def start_node(self, request: Request) -> Response:
        """Start a stopped node in a new generation; a node whose loop runs is left alone."""
        n = self.sup.nodes[request.path_params["node"]]
        if n.task is None or n.task.done():
            n.generation += 1
            n.restarts = 0
            self.sup.start_loop(n)
        return JSONResponse(n.snapshot())

    async def aux(self, request: Request) -> Response:
        """A node's (or the lab's) other processes: GET lists, POST starts one (replacing one
        of that name), DELETE stops one."""
        owner = request.path_params["node"]
        if owner not in self.sup.aux:
            return JSONResponse({"error": f"no node {owner}"}, status_code=404)
        if request.method == "POST":
            return await self._start_aux(owner, request)
        if request.method == "DELETE":
            return await self._stop_aux(owner, request.query_params["name"])
        return JSONResponse({k: a.snapshot() for k, a in self.sup.aux[owner].items()})

    async def _start_aux(self, owner: str, request: Request) -> Response:
        body = await request.json()
        old = self.sup.aux[owner].get(body["name"])
        if old is not None:
            await old.stop()
        a = self.sup.add_aux(owner, body)
        a.start()
        await asyncio.sleep(0)
        await self.sup.emit_lab(owner, EventType.AUX_STARTED, name=a.name)
        return JSONResponse(a.snapshot())

    async def _stop_aux(self, owner: str, name: str) -> Response:
        gone = self.sup.aux[owner].pop(name, None)
        if gone is not None:
            await gone.stop()
            await self.sup.emit_lab(owner, EventType.AUX_STOPPED, name=name)
        return JSONResponse({"stopped": gone is not None})

    async def signal_node(self, request: Request) -> Response:
        """Signal the node's engine, or its engine core (the engine's first child)."""
        n = self.sup.nodes[request.path_params["node"]]
        body = await request.json()
        proc = n.proc
        if proc is None or proc.returncode is not None:
            return JSONResponse({"error": "node not running"}, status_code=409)
        pid = proc.pid
        if body.get("process") == "engine_core":
            core = _engine_core(pid)
            if core is None:
                return JSONResponse({"error": "no engine-core process"}, status_code=409)
            pid = core
        os.kill(pid, getattr(signal, "SIG" + body["signal"]))
        return JSONResponse({"pid": pid})

    async def logs(self, request: Request) -> Response:
        n = self.sup.nodes[request.path_params["node"]]
        inc = int(request.query_params.get("incarnation", n.incarnation))
        f = n.dir / f"{inc}.log"
        return PlainTextResponse(f.read_text() if f.exists() else "")

    async def events(self, request: Request) -> Response:
        """The events after `since`, waiting up to `timeout` s for one (a long poll)."""
        since = int(request.query_params.get("since", 0))
        timeout = float(request.query_params.get("timeout", 0))
        sup = self.sup
        async with sup.cond:
            if len(sup.events) <= since and timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        sup.cond.wait_for(lambda: len(sup.events) > since), timeout
                    )
        return JSONResponse(sup.events[since:])

    async def shutdown(self, _: Request) -> Response:
        sup = self.sup
        await asyncio.gather(*(sup.stop(n) for n in sup.nodes.values()))
        await sup.stop_aux()
        if sup.server is not None:
            sup.server.should_exit = True
        return JSONResponse({"stopped": list(sup.nodes)})


def _engine_core(pid: int) -> int | None:
    """The engine core among the engine's children: the one vLLM titles `VLLM::EngineCore`
    (setproctitle, vllm/utils/system_utils.py; `comm` holds its first 15 characters), else the
    first that is not multiprocessing's resource tracker (real vLLM starts one beside it)."""
    kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    others = []
    for k in kids:
        try:
            comm = Path(f"/proc/{k}/comm").read_text().strip()
            argv = Path(f"/proc/{k}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if comm.startswith("VLLM::EngineCor"):
            return k
        if b"multiprocessing.resource_tracker" not in argv:
            others.append(k)
    return others[0] if others else None
