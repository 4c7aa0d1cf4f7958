"""A prefill and a decode `vllm-lab serve` behind `vllm-lab proxy`: the KV-transfer handshake
as vLLM's NixlConnector does it, and what the decode engine logs and answers when it fails."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

QWEN = "Qwen/Qwen2.5-14B-Instruct-AWQ"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(argv: list[str], extra: dict[str, str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env |= {"GAMEDAY_TIME_SCALE": "1000", "GAMEDAY_VLLM_ERA": "0.33"} | extra
    return subprocess.Popen(
        [sys.executable, "-m", "labengine", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _up(url: str, path: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + path, timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} did not come up")


def _engine(role: str, engine_id: str, port: int, side: int) -> subprocess.Popen[str]:
    config = f'{{"kv_connector":"NixlConnector","kv_role":"{role}","engine_id":"{engine_id}"}}'
    return _start(
        ["serve", QWEN, "--max-model-len", "4096", "--host", "127.0.0.1", "--port", str(port),
         "--master-port", str(_port()), "--kv-transfer-config", config],
        {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side)},
    )  # fmt: skip


@pytest.fixture(scope="module")
def pd() -> Iterator[dict[str, object]]:
    ports = {k: _port() for k in ("prefill", "decode", "proxy", "p_side", "d_side")}
    procs = {
        "prefill": _engine("kv_producer", "prefill-1", ports["prefill"], ports["p_side"]),
        "decode": _engine("kv_consumer", "decode-1", ports["decode"], ports["d_side"]),
        "proxy": _start(
            ["proxy", "--host", "127.0.0.1", "--port", str(ports["proxy"]),
             "--prefiller-host", "127.0.0.1", "--prefiller-port", str(ports["prefill"]),
             "--decoder-host", "127.0.0.1", "--decoder-port", str(ports["decode"])],
            {},
        ),
    }  # fmt: skip
    try:
        _up(f"http://127.0.0.1:{ports['prefill']}", "/health")
        _up(f"http://127.0.0.1:{ports['decode']}", "/health")
        _up(f"http://127.0.0.1:{ports['proxy']}", "/healthcheck")
        yield {"ports": ports, "procs": procs}
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(10)


def test_prefill_answers_with_its_side_channel_and_the_proxy_serves(pd: dict[str, object]) -> None:
    ports: dict[str, int] = pd["ports"]  # type: ignore[assignment]
    body = {"model": QWEN, "prompt": "Introduce yourself.", "max_tokens": 1,
            "kv_transfer_params": {"do_remote_decode": True}}  # fmt: skip
    got = httpx.post(f"http://127.0.0.1:{ports['prefill']}/v1/completions", json=body,
                     trust_env=False, timeout=30).json()  # fmt: skip
    params = got["kv_transfer_params"]
    assert (params["remote_host"], params["remote_port"]) == ("127.0.0.1", ports["p_side"])
    assert (params["remote_engine_id"], params["do_remote_prefill"]) == ("prefill-1", True)
    chat = {"model": QWEN, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    resp = httpx.post(f"http://127.0.0.1:{ports['proxy']}/v1/chat/completions", json=chat,
                      trust_env=False, timeout=30)  # fmt: skip
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"]


def test_a_failed_handshake_is_500_with_vllms_lines_and_health_stays_200(
    pd: dict[str, object],
) -> None:
    """The decode engine is sent to a side channel nobody listens on (what it gets from a
    prefill engine that advertises an address it cannot reach)."""
    ports: dict[str, int] = pd["ports"]  # type: ignore[assignment]
    procs: dict[str, subprocess.Popen[str]] = pd["procs"]  # type: ignore[assignment]
    params = {"do_remote_prefill": True, "do_remote_decode": False,
              "remote_engine_id": "prefill-9", "remote_request_id": "r-1",
              "remote_host": "127.0.0.1", "remote_port": _port(), "remote_block_ids": [[1]],
              "tp_size": 1}  # fmt: skip
    body = {"model": QWEN, "prompt": "hi", "max_tokens": 8, "kv_transfer_params": params}
    decode = f"http://127.0.0.1:{ports['decode']}"
    resp = httpx.post(decode + "/v1/completions", json=body, trust_env=False, timeout=30)
    assert resp.status_code == 500
    error = {"message": "Internal server error", "type": "InternalServerError", "param": None}
    assert resp.json() == {"error": {**error, "code": 500}}
    assert httpx.get(decode + "/health", trust_env=False).status_code == 200
    procs["decode"].terminate()
    out, _ = procs["decode"].communicate(timeout=20)
    want = [
        "[base_worker.py:1435] NIXL transfer failure: handshake_setup_failed | Context: "
        "{'failure_type': 'handshake_setup_failed', 'request_id': None, 'engine_id': "
        "'decode-1', 'remote_engine_id': 'prefill-9'}",
        "zmq.error.Again: Resource temporarily unavailable",
        "[base_worker.py:1471] NIXL transfer failure: handshake_failed | Context: ",
        "'remote_host': '127.0.0.1'",
        "'num_local_blocks': 1, 'num_remote_blocks': 1, 'local_block_ids_sample': [1]}",
        "[serving.py:203] Request cmpl-",
        "failed with an internal error during generation",
    ]
    at = 0
    for piece in want:
        found = out.find(piece, at)
        assert found >= 0, f"{piece!r} not after position {at} in:\n{out}"
        at = found
