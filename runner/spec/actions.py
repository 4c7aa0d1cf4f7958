"""Actions in the scenario format: what inject and a recovery step do to the lab (arguments,
environment, restarts, programs beside the engine, signals, traffic, addresses, scrape
targets, and the team's own steps).
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from runner.spec.kinds import Model
from runner.spec.usersteps import USER_STEP_KINDS, Command, Http, Playbook
from runner.spec.yamlsrc import register_union_tags

# ---- actions (injection and recovery) ----------------------------------------------------------

ArgValue = str | int | float | bool | None


MODEL_TAG = "model_tag"  # `vllm serve MODEL`'s positional argument, by vLLM's own name for it


class SetArgs(Model):
    """Change engine flags, as editing the Deployment's args and re-applying does. A value of
    `true` is a bare flag; `null` removes the flag. The key `model_tag` is the positional model
    (`vllm serve MODEL`), which wins over `--model`."""

    kind: Literal["set_args"]
    node: str = "serving"
    args: dict[
        Annotated[str, Field(pattern=rf"^(--?[A-Za-z0-9][A-Za-z0-9_-]*|{MODEL_TAG})$")], ArgValue
    ]


class SetEnv(Model):
    """Change the engine's environment (`null` unsets), then re-apply."""

    kind: Literal["set_env"]
    node: str = "serving"
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str | None]


class ServiceLinks(Model):
    """A Service named `service` next to the pod, with the pod's `enableServiceLinks`. On
    Kubernetes this is the real mechanism; other labs inject the variables Kubernetes would."""

    kind: Literal["service_links"]
    node: str = "serving"
    service: Annotated[str, Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")] = "vllm"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    enabled: bool


class Restart(Model):
    """Restart nodes (all of them at once when `together`)."""

    kind: Literal["restart"]
    nodes: list[str] = ["serving"]
    together: bool = True


class Rollback(Model):
    """Put back everything this run changed: re-apply the lab's baseline."""

    kind: Literal["rollback"]


class Wait(Model):
    """Do nothing and watch: what the lab then does by itself (a restart policy, a controller)
    is the step, e.g. the kubelet restarting a head alone. The step's `settle_s` bounds the
    watch."""

    kind: Literal["wait"]
    why: Annotated[str, Field(min_length=1, max_length=500)] = Field(
        description="What the lab does meanwhile, as the report shows it."
    )


class Program(enum.StrEnum):
    """Programs a scenario may start on a node (a closed set: no command lines from scenarios)."""

    # the stray GPU process write-up's OmniParser: ~1.4 GiB of GPU memory, idle
    STRAY_GPU_PROCESS = "stray_gpu_process"
    # a GPU XID error (labengine.xidfault): the driver's kernel-log lines, the device unusable
    # while the program lives; stopping it is the device's reset (nvidia-smi --gpu-reset)
    GPU_XID = "gpu_xid"


class XidCode(enum.IntEnum):
    """The XIDs a `gpu_xid` program raises (vllmfacts.xid.Xid)."""

    DOUBLE_BIT_ECC = 48
    FALLEN_OFF_THE_BUS = 79


# The process name each program holds GPU memory under (what nvidia-smi lists), given on its
# command line so that the runner knows what to look for.
GPU_PROCESS_NAMES: dict[Program, str] = {Program.STRAY_GPU_PROCESS: "/omniparser/venv/bin/python"}


PROGRAMS: dict[Program, tuple[str, ...]] = {
    Program.STRAY_GPU_PROCESS: (
        "vllm-lab",
        "stray",
        "--name",
        GPU_PROCESS_NAMES[Program.STRAY_GPU_PROCESS],
    ),
    Program.GPU_XID: ("vllm-lab", "xid"),
}


# a process name is a file name on the node (its pid file): no path, nothing a template reads
PROCESS_NAME = r"^[a-z0-9][a-z0-9-]{0,40}$"


class StartProcess(Model):
    """Start a program on a node, beside its engine (a host action)."""

    kind: Literal["start_process"]
    node: str
    name: Annotated[str, Field(pattern=PROCESS_NAME)]
    program: Program
    mib: Annotated[int | None, Field(ge=1, le=1_000_000)] = None
    xid: XidCode | None = Field(default=None, description="The XID a gpu_xid program raises.")

    @model_validator(mode="after")
    def _program_parameters(self) -> StartProcess:
        if (self.xid is None) == (self.program is Program.GPU_XID):
            raise ValueError("xid (48 or 79) is given for program gpu_xid, and only for it")
        if self.mib is not None and self.program is not Program.STRAY_GPU_PROCESS:
            raise ValueError("mib is given only for program stray_gpu_process")
        return self

    def argv(self) -> list[str]:
        """The program's command line."""
        extra = ["--mib", str(self.mib)] if self.mib else []
        if self.xid is not None:
            extra = ["--xid", str(int(self.xid))]
        return [*PROGRAMS[self.program], *extra]


class StopProcess(Model):
    """Stop a program a `start_process` started (its name, as there)."""

    kind: Literal["stop_process"]
    node: str
    name: Annotated[str, Field(pattern=PROCESS_NAME)]


class SignalName(enum.StrEnum):
    KILL = "KILL"
    TERM = "TERM"
    INT = "INT"
    # the process lives and does nothing: a hung engine core (deadlocked, or stuck in a kernel or
    # a collective), which nothing that watches for a dead process notices
    STOP = "STOP"


class EngineProcess(enum.StrEnum):
    """A process of a node's engine that a signal can reach."""

    MAIN = "main"  # the API server, the container's PID 1
    ENGINE_CORE = "engine_core"  # its engine core, the main process's child


class Signal(Model):
    """Send a signal to a node's engine: its main (API-server) process or its engine core."""

    kind: Literal["signal"]
    node: str
    process: EngineProcess = EngineProcess.MAIN
    signal: SignalName


class TrafficRequest(Model):
    prompt: str
    max_tokens: Annotated[int, Field(ge=1)] = 16


class Traffic(Model):
    """Send requests as users would; their outcome is not asserted (that is what probes do)."""

    kind: Literal["traffic"]
    node: str | None = None
    requests: Annotated[list[TrafficRequest], Field(min_length=1)]


class ChangeAddress(Model):
    """The node gets a new address on a network (DHCP after re-cabling). Without `address` the
    lab hands out one (the node's host number + 10 on the same network), so one scenario fits
    every lab's address plan."""

    kind: Literal["change_address"]
    node: str
    network: Literal["management"] = "management"
    address: Annotated[str, Field(pattern=r"^\d{1,3}(\.\d{1,3}){3}$")] | None = None


class ScrapeTargets(Model):
    """Point Prometheus's job at the nodes' addresses on this network, and reload it."""

    kind: Literal["scrape_targets"]
    job: str = "node-exporter"
    network: Literal["management", "overlay"]


Action = Annotated[
    SetArgs
    | SetEnv
    | ServiceLinks
    | Restart
    | Rollback
    | Wait
    | StartProcess
    | StopProcess
    | Signal
    | Traffic
    | ChangeAddress
    | ScrapeTargets
    | Command
    | Playbook
    | Http,
    Field(discriminator="kind"),
]


register_union_tags(
    "http",
    "inference",
    "targets",
    "promql",
    "gpu_processes",
    "node_state",
    "log_silence",
    "set_args",
    "set_env",
    "service_links",
    "restart",
    "rollback",
    "wait",
    "start_process",
    "stop_process",
    "signal",
    "traffic",
    "change_address",
    "scrape_targets",
    *USER_STEP_KINDS,
)
