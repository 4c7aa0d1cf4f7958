"""vLLM's KVTransferConfig, the `--kv-transfer-config` flag's value (config/kv_transfer.py:56-124
of the vLLM 0.33.0 wheel; vllmfacts.kvtransfer has the rest of prefill/decode disaggregation).
A module of its own because it is a pydantic dataclass, as vLLM's is: importing pydantic costs
an engine process a third of its start-up, and only an engine given the flag needs it."""

from __future__ import annotations

import argparse
import uuid
from dataclasses import field
from typing import Any, Literal, get_args

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

KVProducer = Literal["kv_producer", "kv_both"]
KVConsumer = Literal["kv_consumer", "kv_both"]
KVRole = Literal[KVProducer, KVConsumer]


@dataclass(config=ConfigDict(extra="forbid"))
class KVTransferConfig:
    """vLLM's KVTransferConfig (config/kv_transfer.py:56-124): a pydantic dataclass, so that a
    bad value fails as vLLM's does, with pydantic's own message."""

    kv_connector: str | None = None
    engine_id: str | None = None
    kv_buffer_device: str = "cuda"
    kv_role: KVRole | None = None
    kv_port: int = 14579
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)
    kv_connector_module_path: str | None = None
    enable_permute_local_kv: bool = False
    kv_load_failure_policy: Literal["recompute", "fail"] = "fail"

    def __post_init__(self) -> None:
        if self.engine_id is None:
            self.engine_id = str(uuid.uuid4())
        if self.kv_role is not None and self.kv_role not in get_args(KVRole):
            raise ValueError(
                f"Unsupported kv_role: {self.kv_role}. Supported roles are {get_args(KVRole)}"
            )
        if self.kv_connector is not None and self.kv_role is None:
            raise ValueError(
                "Please specify kv_role when kv_connector "
                f"is set, supported roles are {get_args(KVRole)}"
            )

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_connector is not None and self.kv_role in get_args(KVProducer)

    @property
    def is_kv_consumer(self) -> bool:
        return self.kv_connector is not None and self.kv_role in get_args(KVConsumer)


def parse_kv_transfer_config(val: str) -> KVTransferConfig:
    """argparse's `type` for --kv-transfer-config, as vLLM's parse_dataclass."""
    try:
        return TypeAdapter(KVTransferConfig).validate_json(val)
    except ValidationError as e:
        raise argparse.ArgumentTypeError(repr(e)) from e
