"""The local lab supervisor's readiness probe: GET /health answers 200, as the kubelet's httpGet
probe asks; anything else (another status, a refused connection, no answer in time) is not
ready."""

from __future__ import annotations

import asyncio

import pytest

from runner.labs.local.supervisor import health_ok


async def _serve(status: bytes | None) -> tuple[asyncio.Server, int, list[bytes]]:
    """A server on loopback answering every request with `status` (None: never answers)."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        if status is None:
            await asyncio.sleep(5)
        else:
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


@pytest.mark.parametrize(("status", "ok"), [(b"200 OK", True), (b"503 Service Unavailable", False)])
def test_the_status_decides(status: bytes, ok: bool) -> None:
    async def probe() -> tuple[bool, list[bytes]]:
        server, port, seen = await _serve(status)
        async with server:
            return await health_ok("127.0.0.1", port), seen

    got, seen = asyncio.run(probe())
    assert got is ok
    assert seen[0].startswith(b"GET /health HTTP/1.1\r\n")


def test_no_answer_in_time_and_a_refused_connection_are_not_ready() -> None:
    async def probe() -> tuple[bool, bool]:
        server, port, _ = await _serve(None)
        async with server:
            silent = await health_ok("127.0.0.1", port, timeout_s=0.2)
        return silent, await health_ok("127.0.0.1", port, timeout_s=0.2)  # now closed

    assert asyncio.run(probe()) == (False, False)
