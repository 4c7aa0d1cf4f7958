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

import difflib
import enum
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from labengine.wording import Era
from runner.errors import InventoryError, ScenarioError, plain_message
from runner.scenario import MAX_WINDOW_S, LabKind, LoadedScenario, Restart, version_text
from runner.yamlsrc import Source, load

HINT = "see inventories/local.yaml and README.md 'Inventories'"
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


class RestartPolicy(enum.StrEnum):
    NO = "no"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"  # with CrashLoopBackOff-style back-off


class GpuSpec(Model):
    type: str = "a10g"
    count: Annotated[int, Field(ge=0, le=16)] = 1


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
    connection: dict[str, Any] = {}
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

    @field_validator("restart", mode="before")
    @classmethod
    def _yaml_no(cls, v: Any) -> Any:
        # YAML 1.1 reads an unquoted `no` as false; a restart policy of false means "no"
        return "no" if v is False else v

    def rendered_args(self) -> list[str]:
        return [
            a.replace("{address}", self.address).replace("{port}", str(self.port))
            for a in self.args
        ]


class AlertRule(Model):
    name: str
    expr: str
    for_s: Annotated[float, Field(ge=0)] = Field(description="Real-world seconds (scaled).")
    severity: str = "page"
    summary: str = ""
    runbook: str = ""
    procedure: str = Field(default="", description="What the person paged does, in order.")
    log_command: str = Field(default="", description="The command that shows the evidence.")
    runbook_section: str = Field(default="", description="Where the write-up explains it.")


SEED_RULES = (
    AlertRule(
        name="ServingDown",
        expr='up{job="vllm"} < 1 or absent(up{job="vllm"})',
        for_s=300,
        summary="vLLM serving is down (NoData counts as down)",
        runbook="restart all four nodes together; `docker logs` / `kubectl logs "
        "--previous` on the head; seeds/000 section 8",
        procedure="restart all four together (head and workers at once): a new head does not "
        "bring back the old NCCL process group; exit code 0 means on-failure never fires",
        log_command="docker logs --tail 200 <head container> (Kubernetes: kubectl logs "
        "--previous <head pod>)",
        runbook_section="seeds/000 section 8",
    ),
    AlertRule(
        name="ExporterTargetDown",
        expr='count(up{job=~"node-exporter|gpu-exporter"} == 0) > 0',
        for_s=600,
        severity="warning",
        summary="an exporter target is down: monitoring is half-blind",
        runbook="check scrape targets against the nodes' current addresses; move them to "
        "stable (overlay) addresses; seeds/000 section 7",
        procedure="compare the scrape targets with the nodes' current addresses; scrape the "
        "stable overlay addresses, then reload Prometheus",
        log_command="curl -s <prometheus>/api/v1/targets?state=active (lastError per target)",
        runbook_section="seeds/000 section 7",
    ),
)


PROMETHEUS_IMAGE = "prom/prometheus:v2.53.1"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.27.0"


class Monitoring(Model):
    """A real Prometheus scraping each node's node-exporter by its management address and the
    engines' /metrics, with the seeds' alert rules (`for:` scaled by the lab's time scale). On
    Kubernetes a Deployment in the lab's namespace that finds the engines' pods through the API
    (runner.labs.kubernetes.monitoring); the node-exporter fields do not apply there."""

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
    """The docker-compose lab: its compose file (relative to the inventory), project name and
    image (built by `gameday lab build`)."""

    file: str = "../compose/compose.yaml"
    project: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$")] = "gameday-compose"
    image: str = "gameday-lab:latest"
    base_image: str = "debian:bookworm-slim"
    networks: dict[str, str] = Field(
        default={"management": "mgmt", "overlay": "overlay"},
        description="The lab's networks by role -> their names in the compose file.",
    )
    playbooks: str = "../playbooks"
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
    """The Kubernetes lab (seeds/004's EKS workshop): where it runs and what its manifests say.
    Each inventory host is a workload of that name (the single-node server a Deployment with
    `strategy: Recreate`); `gameday lab manifests` prints them."""

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
    engine_command: tuple[str, ...] = ("vllm-lab", "serve")
    vllm_version: Era = Field(
        default=Era.V0_19,
        description="The vLLM the lab's engines are (or stand in for): which release's messages "
        "they print and which per_vllm sections of a scenario apply. The drivers hand it to the "
        f"lab engine as {ERA_ENV}.",
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


_HOST_KEYS = {
    "gameday_role": "role",
    "gameday_address": "address",
    "gameday_port": "port",
    "gameday_gpu": "gpu",
    "gameday_restart": "restart",
    "gameday_engine_args": "args",
    "gameday_engine_env": "env",
    "gameday_management_address": "management_address",
    "gameday_overlay_address": "overlay_address",
    "gameday_published": "published",
    "gameday_service": "service",
}
# what an adopted deployment's hosts may leave out: their engine runs as the team deployed it
_ADOPTED_DEFAULTS = {"role": Role.SERVING, "address": "0.0.0.0", "args": ()}


def load_inventory(path: Path) -> Inventory:
    src = load(path, InventoryError, "inventory")
    data = src.data
    if not isinstance(data, dict) or not isinstance(data.get("all"), dict):
        raise InventoryError(
            "an inventory is Ansible YAML with a top-level 'all:' group",
            file=path,
            line=1,
            hint=HINT,
        )
    walk = _Walk(src)
    walk.group("all", data["all"], ("all",), {})
    lab = _lab_spec(src, data["all"].get("vars") or {})
    adopted = lab.adopt is not None
    nodes = [
        _node(src, name, hv, walk.groups.get(name, []), walk.host_lines[name], adopted)
        for name, hv in walk.hosts.items()
    ]
    if not nodes:
        raise InventoryError("the inventory has no hosts", file=path, line=1, hint=HINT)
    from runner.inventory_adopt import check_adoption  # it names this module's types

    check_adoption(src, lab, nodes, walk.host_lines)
    return Inventory(path=path, lab=lab, nodes=tuple(nodes))


def _lab_spec(src: Source, all_vars: Any) -> LabSpec:
    """all.vars.gameday_lab: which lab this is."""
    path = src.path
    lab_raw = all_vars.get("gameday_lab") if isinstance(all_vars, dict) else None
    if not isinstance(lab_raw, dict):
        raise InventoryError(
            "all.vars.gameday_lab is missing: it says which lab this is",
            file=path,
            line=src.line_of(("all", "vars")),
            field="all.vars",
            hint=HINT,
        )
    try:
        lab = LabSpec.model_validate(lab_raw)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ("all", "vars", "gameday_lab", *err["loc"])
        raise InventoryError(
            _msg(err), file=path, line=src.line_of(loc), field=".".join(map(str, loc)), hint=HINT
        ) from None
    if lab.kind is LabKind.KUBERNETES and (
        lab.kubernetes is None or lab.kubernetes.context is None
    ):
        loc = ("all", "vars", "gameday_lab", "kubernetes")
        raise InventoryError(
            "a Kubernetes lab names its kube context: gameday creates and labels a namespace "
            "there, and never in whichever cluster is the current context",
            file=path,
            line=src.line_of(loc),
            field=".".join((*loc, "context")),
            hint="set gameday_lab.kubernetes.context to your cluster's context "
            "(`kubectl config get-contexts` lists them); see inventories/eks.yaml",
        )
    _image_matches_version(src, lab)
    return lab


VLLM_IMAGE = re.compile(r"^(?:docker\.io/)?vllm/vllm-openai:v(?P<era>\d+\.\d+)\.\d+")


def _image_matches_version(src: Source, lab: LabSpec) -> None:
    """vLLM's own image names its release: one that is not the lab's vllm_version would run one
    vLLM while the scenarios are resolved for another."""
    if lab.kind is not LabKind.KUBERNETES or lab.kubernetes is None:
        return
    m = VLLM_IMAGE.match(lab.kubernetes.image)
    if m is None or m["era"] == lab.vllm_version.value:
        return
    given = "image" in lab.kubernetes.model_fields_set
    loc = ("all", "vars", "gameday_lab", *(("kubernetes", "image") if given else ("vllm_version",)))
    known = {e.value for e in Era}
    other = (
        f'or vllm_version to "{m["era"]}"'
        if m["era"] in known
        else f"(gameday knows vLLM {' and '.join(sorted(known))}: the scenarios' expectations "
        "are written against those releases' words)"
    )
    raise InventoryError(
        f"the image {lab.kubernetes.image} is vLLM {m['era']}, but vllm_version is "
        f"{lab.vllm_version.value!r}",
        file=src.path,
        line=src.line_of(loc),
        field=".".join(loc),
        hint=f"set gameday_lab.kubernetes.image to vllm/vllm-openai:v{lab.vllm_version.version} "
        + other,
    )


def _node(
    src: Source, name: str, hv: dict[Any, Any], groups: list[str], at: Loc, adopted: bool = False
) -> Node:
    """A host's node from its merged variables (`at`: where the host is in the file)."""
    path = src.path
    fields: dict[str, Any] = {"name": name, "groups": tuple(groups)}
    if adopted:
        fields |= _ADOPTED_DEFAULTS
    conn: dict[str, Any] = {}
    for k, v in hv.items():
        if not isinstance(k, str):
            raise InventoryError(
                f"host variable name {k!r} is not a string",
                file=path,
                line=src.line_of((*at, k)),
                field=f"{name}.{k}",
                hint="quote it, or name it as Ansible does (letters, digits, _)",
            )
        if k in _HOST_KEYS:
            fields[_HOST_KEYS[k]] = v
        elif k.startswith("gameday_"):
            raise InventoryError(
                f"unknown host variable {k!r}; known: {sorted(_HOST_KEYS)}",
                file=path,
                line=src.line_of((*at, k)),
                field=f"{name}.{k}",
                hint=HINT,
            )
        else:
            conn[k] = v
    fields["connection"] = conn
    try:
        return Node.model_validate(fields)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        key = next((hk for hk, f in _HOST_KEYS.items() if err["loc"] and f == err["loc"][0]), None)
        loc = (*at, key) if key else at
        raise InventoryError(
            _msg(err),
            file=path,
            line=src.line_of(loc),
            field=f"{name}.{key or err['loc'][0]}",
            hint=HINT,
        ) from None


def _msg(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key (check its spelling)"
    if err["type"] == "missing":
        return "required key is missing"
    return plain_message(err)


_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class _Walk:
    """The hosts of an inventory's groups, walked as Ansible does: each host's variables merged
    (group vars, children's over parents', the host's own last), the groups it is in, and where
    it first appears in the file."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.hosts: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, list[str]] = {}
        self.host_lines: dict[str, Loc] = {}

    def group(
        self, name: str, body: Any, loc: Loc, inherited: dict[str, Any], chain: tuple[str, ...] = ()
    ) -> None:
        chain = (*chain, name) if name != "all" else chain
        if body is None:
            return
        self._check_group(name, body, loc)
        self._no_era_env(body.get("vars"), (*loc, "vars"))
        gvars = {**inherited, **(body.get("vars") or {})}
        for host, hv in (body.get("hosts") or {}).items():
            self._host(host, hv, (*loc, "hosts", host), gvars, chain)
        for child, cbody in (body.get("children") or {}).items():
            self.group(child, cbody, (*loc, "children", child), gvars, chain)

    def _check_group(self, name: str, body: Any, loc: Loc) -> None:
        src = self.src
        if not isinstance(body, dict):
            raise InventoryError(
                f"group {name!r} must be a mapping of hosts/children/vars",
                file=src.path,
                line=src.line_of(loc),
                field=".".join(map(str, loc)),
            )
        for key in body:
            if key not in ("hosts", "children", "vars"):
                raise InventoryError(
                    f"unknown key {key!r} in group {name!r} (Ansible groups have "
                    "hosts, children and vars)",
                    file=src.path,
                    line=src.line_of((*loc, key)),
                    field=".".join(map(str, (*loc, key))),
                )
        for key in ("hosts", "children", "vars"):
            if body.get(key) is not None and not isinstance(body[key], dict):
                raise InventoryError(
                    f"{key} of group {name!r} must be a mapping",
                    file=src.path,
                    line=src.line_of((*loc, key)),
                    field=".".join(map(str, (*loc, key))),
                    hint=HINT,
                )

    def _no_era_env(self, variables: Any, loc: Loc) -> None:
        """The vLLM version is the lab's (gameday_lab.vllm_version), said once: a node's own
        GAMEDAY_VLLM_ERA would make its engine print one release's words while the runner
        resolves the scenarios for another, so it is refused rather than ranked."""
        env = variables.get("gameday_engine_env") if isinstance(variables, dict) else None
        if isinstance(env, dict) and ERA_ENV in env:
            at = (*loc, "gameday_engine_env", ERA_ENV)
            raise InventoryError(
                f"{ERA_ENV} is set by gameday from the lab's vllm_version, not per node",
                file=self.src.path,
                line=self.src.line_of(at),
                field=".".join(map(str, at)),
                hint=f"remove it here and set all.vars.gameday_lab.vllm_version: "
                f'"{env[ERA_ENV]}" (one of {", ".join(repr(e.value) for e in Era)})',
            )

    def _host(
        self, host: Any, hv: Any, loc: Loc, gvars: dict[str, Any], chain: tuple[str, ...]
    ) -> None:
        src = self.src
        if not _NAME.match(str(host)):
            raise InventoryError(f"bad host name {host!r}", file=src.path, line=src.line_of(loc))
        if hv is not None and not isinstance(hv, dict):
            raise InventoryError(
                f"host {host!r} must map to its variables",
                file=src.path,
                line=src.line_of(loc),
            )
        self._no_era_env(hv, loc)
        merged = {**self.hosts.get(host, {}), **gvars, **(hv or {})}
        merged.pop("gameday_lab", None)
        self.hosts[host] = merged
        for g in chain:
            if g not in self.groups.setdefault(host, []):
                self.groups[host].append(g)
        self.host_lines.setdefault(host, loc)


def check_scenario(ls: LoadedScenario, inventory: Inventory) -> None:
    """Every node a scenario names exists in the inventory: its `target` and every `node` are
    hosts, a restart's `nodes` hosts or groups. A ScenarioError names the scenario's file, line
    and field, and the inventory."""
    hosts = {n.name for n in inventory.nodes}
    groups = {g for n in inventory.nodes for g in n.groups}
    for loc, name, groups_too in _node_refs(ls.scenario, ()):
        if name in hosts or (groups_too and name in groups):
            continue
        what = "a group, not a host," if name in groups else "not a host"
        known = ", ".join(sorted(hosts)) + (
            f"; groups: {', '.join(sorted(groups))}" if groups_too else ""
        )
        raise ScenarioError(
            f"{name!r} is {what} of the inventory {inventory.path}",
            file=ls.path,
            line=load(ls.path, ScenarioError, "scenario").line_of(loc),
            field=".".join(map(str, loc)),
            hint=_near(name, hosts | (groups if groups_too else set()))
            + f"name one of its hosts: {known}",
        )


def _node_refs(obj: Any, loc: Loc) -> list[tuple[Loc, str, bool]]:
    """(location, node name, whether a group is allowed) of every node a scenario names."""
    if isinstance(obj, BaseModel):
        refs = []
        for attr, info in type(obj).model_fields.items():
            value = getattr(obj, attr)
            key = (*loc, info.alias or attr)
            if attr in ("node", "target") and isinstance(value, str):
                refs.append((key, value, False))
            elif attr == "nodes" and isinstance(value, list):
                groups_too = isinstance(obj, Restart)
                refs += [((*key, i), v, groups_too) for i, v in enumerate(value)]
            else:
                refs += _node_refs(value, key)
        return refs
    if isinstance(obj, list | tuple):
        return [r for i, v in enumerate(obj) for r in _node_refs(v, (*loc, i))]
    if isinstance(obj, dict):  # per_lab: its sections name nodes too
        return [
            r
            for k, v in obj.items()
            for r in _node_refs(v, (*loc, k.value if isinstance(k, enum.Enum) else k))
        ]
    return []


def _near(name: str, known: set[str]) -> str:
    near = difflib.get_close_matches(name, sorted(known), n=1)
    return f"did you mean {near[0]!r}? " if near else ""
