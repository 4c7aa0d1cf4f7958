"""`vllm-lab proxy`: the disaggregated-serving proxy vLLM's NixlConnector tests put in front of a
prefill and a decode engine (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py), with
its behaviour (its flags, toy_proxy_server.py's, are in labengine/proxyflags.py):

- a completion request goes to the prefill engine first, with `max_tokens` 1, not streamed, and
  `kv_transfer_params` asking for a remote decode (`do_remote_decode`); the prefill's answer
  carries the `kv_transfer_params` that name its side channel;
- the same request, with those parameters, goes to the decode engine, and its answer is streamed
  back as it comes. The response starts (200) before the decode engine has answered (Starlette's
  StreamingResponse sends its start before the first chunk, starlette/responses.py
  stream_response; FastAPI's is Starlette's): when the
  decode engine answers an error, the proxy's `raise_for_status` fails inside the stream, and
  the client sees a 200 whose body breaks off (the proxy prints the error and its traceback);
- `/healthcheck` answers 200 with the instance counts, whatever the engines do.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import traceback
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class Proxy:
    """Round-robin over the prefill and decode instances, as the toy proxy does."""

    def __init__(
        self,
        prefill: list[tuple[str, int]],
        decode: list[tuple[str, int]],
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # the lab's own addresses: never through a proxy from the environment
        def client(host: str, port: int) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=f"http://{host}:{port}/v1",
                timeout=None,
                trust_env=False,
                transport=transport,
            )

        self.prefill = [client(h, p) for h, p in prefill]
        self.decode = [client(h, p) for h, p in decode]
        self._p = itertools.cycle(range(len(self.prefill)))
        self._d = itertools.cycle(range(len(self.decode)))

    async def _prefill(self, endpoint: str, body: dict[str, Any], rid: str) -> dict[str, Any]:
        req = dict(body)
        req["kv_transfer_params"] = {
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "remote_engine_id": None,
            "remote_block_ids": None,
            "remote_host": None,
            "remote_port": None,
        }
        req["stream"] = False
        req["max_tokens"] = 1
        if "max_completion_tokens" in req:
            req["max_completion_tokens"] = 1
        req.pop("stream_options", None)
        req.pop("min_tokens", None)
        req.pop("min_completion_tokens", None)
        resp = await self.prefill[next(self._p)].post(
            endpoint, json=req, headers={"X-Request-Id": rid}
        )
        resp.raise_for_status()
        got: dict[str, Any] = resp.json()
        return got

    async def handle(self, endpoint: str, request: Request) -> Response:
        try:
            body = await request.json()
            rid = str(uuid.uuid4())
            answer = await self._prefill(endpoint, body, rid)
            params = answer.get("kv_transfer_params", {})
            if params:
                body["kv_transfer_params"] = params
            decode = self.decode[next(self._d)]
        except Exception as e:
            _report(endpoint, e)
            raise

        async def stream() -> AsyncIterator[bytes]:
            async with decode.stream(
                "POST", endpoint, json=body, headers={"X-Request-Id": rid}
            ) as resp:
                try:
                    resp.raise_for_status()
                except httpx.HTTPStatusError as e:
                    _report(endpoint, e)
                    raise
                async for chunk in resp.aiter_bytes():
                    yield chunk

        return StreamingResponse(stream(), media_type="application/json")

    async def completions(self, request: Request) -> Response:
        return await self.handle("/completions", request)

    async def chat(self, request: Request) -> Response:
        return await self.handle("/chat/completions", request)

    async def healthcheck(self, _: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "prefill_instances": len(self.prefill),
                "decode_instances": len(self.decode),
            }
        )


def _report(endpoint: str, e: BaseException) -> None:
    print(f"Error occurred in disagg prefill proxy server - {endpoint} endpoint", flush=True)
    print(e, flush=True)
    print("".join(traceback.format_exception(e)), flush=True)


def run(args: argparse.Namespace) -> int:
    if len(args.prefiller_hosts) != len(args.prefiller_ports):
        sys.stderr.write(
            "ValueError: Number of prefiller hosts must match number of prefiller ports\n"
        )
        return 1
    if len(args.decoder_hosts) != len(args.decoder_ports):
        sys.stderr.write("ValueError: Number of decoder hosts must match number of decoder ports\n")
        return 1
    proxy = Proxy(
        list(zip(args.prefiller_hosts, args.prefiller_ports, strict=True)),
        list(zip(args.decoder_hosts, args.decoder_ports, strict=True)),
    )
    print(
        f"Initialized {len(proxy.prefill)} prefill clients and {len(proxy.decode)} decode clients.",
        flush=True,
    )
    uvicorn.run(app(proxy), host=args.host, port=args.port)
    return 0


def app(proxy: Proxy) -> Starlette:
    return Starlette(
        routes=[
            Route("/v1/completions", proxy.completions, methods=["POST"]),
            Route("/v1/chat/completions", proxy.chat, methods=["POST"]),
            Route("/healthcheck", proxy.healthcheck, methods=["GET"]),
        ]
    )
