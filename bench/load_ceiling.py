"""The load generator's own limits on this machine (runner/run/traffic.py): how many requests a
second it drives and records against a trivial server, what CPU that costs the runner's
process, and how close to their intended times requests are sent.

    python bench/load_ceiling.py [--rates 50,200,500,1000,2000] [--seconds 3] [--users 32]

The server is a process of its own (an asyncio protocol answering every request with the same
small /v1/completions body, keep-alive), so its CPU is not the generator's. For each open-loop
rate the generator runs `--seconds` wall seconds; then one closed-loop run with `--users`. One
line each: requests recorded per second, how many failed, the generator process's CPU seconds
per wall second (user + system, the whole runner process: the generator is a thread of it), the
send lateness (actual start - intended send time: p50, p99, max in ms) and latency p50/p99 from
the intended time. It asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.run.impact import percentile  # noqa: E402
from runner.run.traffic import Traffic  # noqa: E402
from runner.spec.workload import Load  # noqa: E402

BODY = json.dumps(
    {"choices": [{"text": "ok", "finish_reason": "stop"}], "usage": {"completion_tokens": 1}}
).encode()
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)


class _Trivial(asyncio.Protocol):
    """Answers each request (headers, then its content-length of body) with ANSWER."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.t, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self.buf = rest[length:]
            self.t.write(ANSWER)


def serve(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Trivial, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.2f}"


def one(url: str, spec: Load, seconds: float) -> str:
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    traffic = Traffic(url, spec, seconds).start()
    time.sleep(seconds)
    traffic.stop()
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    sent = traffic.sent()
    late = [s.start - s.intended for s in sent]
    ok = [s.latency_s for s in sent if not s.failed]
    what = f"rate {spec.rate:g}/s" if spec.rate else f"{spec.concurrency} users"
    return (
        f"{what:>12}: {len(sent) / seconds:8.1f} recorded/s ({len(sent)} in {seconds:g} s, "
        f"{sum(s.failed for s in sent)} failed, {traffic.unfinished} cut off), "
        f"CPU {cpu / wall:.2f} s/s, send late p50 {_ms(percentile(late, 50))} "
        f"p99 {_ms(percentile(late, 99))} max {_ms(max(late, default=None))} ms, "
        f"latency p50 {_ms(percentile(ok, 50))} p99 {_ms(percentile(ok, 99))} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="50,200,500,1000,2000")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        print(f"# gameday load generator ceiling {datetime.now(UTC).isoformat(timespec='seconds')}")
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; trivial server in its own process"
        )
        base = {"mix": [{"api": "completions"}], "timeout_s": 10, "max_requests": 1_000_000}
        open_loop = Load.model_validate({**base, "rate": 1})
        for rate in (float(r) for r in args.rates.split(",")):
            # past the format's cap on purpose: where the generator's ceiling is, is the question
            print(one(url, open_loop.model_copy(update={"rate": rate}), args.seconds))
        print(one(url, Load.model_validate({**base, "concurrency": args.users}), args.seconds))
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
