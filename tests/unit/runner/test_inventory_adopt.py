"""`gameday_lab.adopt:`: the option as the inventory loads it, its mistakes as one message with
file, line and field (exit 2), and the drivers' refusals of a deployment that has not opted in
(exit 3), which read labels and touch nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runner.errors import InventoryError, LabError
from runner.labs import open_lab
from runner.labs.compose.adopt import AdoptedComposeLab
from runner.labs.kubernetes.adopt import AdoptedKubernetesLab
from runner.spec.inventory import Role
from runner.spec.inventory_load import load_inventory

COMPOSE = """\
all:
  vars:
    gameday_lab:
      name: team-stack
      kind: compose
      adopt: {project: my-stack}
  hosts:
    serving:
      gameday_service: vllm
      gameday_published: 127.0.0.1:28000
    embed: {gameday_published: 127.0.0.1:28001}
"""
KUBE = """\
all:
  vars:
    gameday_lab:
      name: team-stack
      kind: kubernetes
      kubernetes: {context: prod-eu, namespace: team-ml}
      adopt:
        deployment: team-vllm
  hosts:
    serving: {gameday_port: 8000}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "inventory.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def refused(tmp_path: Path, text: str) -> InventoryError:
    with pytest.raises(InventoryError) as e:
        load_inventory(write(tmp_path, text))
    assert e.value.exit_code == 2
    return e.value


def test_a_compose_adoption_maps_each_host_onto_a_service(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, COMPOSE))
    assert inv.lab.adopt is not None and inv.lab.adopt.project == "my-stack"
    serving, embed = inv.nodes
    assert (serving.service, embed.service) == ("vllm", None)  # embed: its host's name
    # what an adopted host leaves out: the team's deployment says it
    assert (serving.role, serving.address, serving.args) == (Role.SERVING, "0.0.0.0", ())
    assert serving.url == "http://127.0.0.1:28000"
    assert type(open_lab(inv)) is AdoptedComposeLab
    assert AdoptedComposeLab(inv).services == {"serving": "vllm", "embed": "embed"}


def test_a_kubernetes_adoption_names_one_workload(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, KUBE))
    assert inv.lab.adopt is not None and inv.lab.adopt.workload == ("deployment", "team-vllm")
    assert type(open_lab(inv)) is AdoptedKubernetesLab
    statefulset = KUBE.replace("deployment: team-vllm", "statefulset: team-vllm")
    inv = load_inventory(write(tmp_path, statefulset))
    assert inv.lab.adopt is not None and inv.lab.adopt.workload == ("statefulset", "team-vllm")


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (
            COMPOSE.replace("kind: compose", "kind: local"),
            6,
            "all.vars.gameday_lab.adopt",
            "a local lab cannot adopt a deployment: its nodes are processes gameday starts",
        ),
        (
            COMPOSE.replace("{project: my-stack}", "{deployment: my-stack}"),
            6,
            "all.vars.gameday_lab.adopt.deployment",
            "adopt.deployment is for Kubernetes labs; a compose lab adopts a project",
        ),
        (
            COMPOSE.replace("{project: my-stack}", "{}"),
            6,
            "all.vars.gameday_lab.adopt.project",
            "a compose lab adopts a Compose project: adopt.project is missing",
        ),
        (
            COMPOSE.replace("{project: my-stack}", "{projct: my-stack}"),
            6,
            "all.vars.gameday_lab.adopt.projct",
            "unknown key (check its spelling)",
        ),
        (
            COMPOSE.replace("embed: {", "embed: {gameday_service: vllm, "),
            11,
            "embed.gameday_service",
            "hosts serving and embed are both service 'vllm'",
        ),
        (
            KUBE.replace("      adopt:\n        deployment: team-vllm\n", "").replace(
                "{gameday_port: 8000}",
                "{gameday_role: serving, gameday_address: 0.0.0.0, gameday_engine_args: [m],\n"
                "              gameday_service: vllm}",
            ),
            9,
            "serving.gameday_service",
            "gameday_service maps a host onto a service of an adopted Compose project; this "
            "lab adopts none",
        ),
        (
            COMPOSE.replace("      adopt:", "      monitoring: {}\n      adopt:"),
            6,
            "all.vars.gameday_lab.monitoring",
            "an adopted deployment has no Prometheus that gameday runs: monitoring is for the "
            "labs gameday creates",
        ),
        (
            KUBE.replace("deployment: team-vllm", "project: my-stack"),
            8,
            "all.vars.gameday_lab.adopt.project",
            "adopt.project is for compose labs; a Kubernetes lab adopts a workload",
        ),
        (
            KUBE.replace("deployment: team-vllm", "deployment: a\n        statefulset: b"),
            7,
            "all.vars.gameday_lab.adopt",
            "a Kubernetes lab adopts one workload: give adopt.deployment or adopt.statefulset, "
            "not both, not neither",
        ),
        (
            KUBE + "    second: {gameday_port: 8001}\n",
            11,
            "second",
            "an adopted Kubernetes workload is one serving node: the inventory has 2 hosts",
        ),
        (
            KUBE.replace("{gameday_port: 8000}", "{gameday_role: head}"),
            10,
            "serving",
            "an adopted Kubernetes workload is one serving node: the inventory has a head",
        ),
    ],
)
def test_a_mistake_in_the_adopt_option_is_one_message_with_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, message: str
) -> None:
    err = refused(tmp_path, text)
    assert (err.line, err.field) == (line, field)
    assert str(err).startswith(f"{tmp_path / 'inventory.yaml'}:{line} [{field}]: {message}")


class FakeDocker:
    """A docker client whose project holds `containers` (name -> labels); it records every
    call, so a test can show that a refusal only listed containers."""

    def __init__(self, containers: dict[str, dict[str, str]]) -> None:
        self.calls: list[str] = []
        self._containers = [SimpleNamespace(name=n, labels=lb) for n, lb in containers.items()]
        self.containers = SimpleNamespace(list=self._list)

    def _list(self, all: bool, filters: dict[str, Any]) -> list[Any]:
        self.calls.append(f"list {filters}")
        wanted = dict(f.split("=", 1) for f in filters["label"])
        return [c for c in self._containers if wanted.items() <= c.labels.items()]


def test_a_compose_project_without_the_opt_in_label_is_refused_with_how_to_opt_in(
    tmp_path: Path,
) -> None:
    lab = AdoptedComposeLab(load_inventory(write(tmp_path, COMPOSE)))
    project = {"com.docker.compose.project": "my-stack"}
    lab._client = FakeDocker(
        {
            "my-stack-vllm-1": project
            | {"com.docker.compose.service": "vllm", "gameday.io/allow-faults": "team-stack"},
            "my-stack-embed-1": project
            | {"com.docker.compose.service": "embed", "gameday.io/allow-faults": "staging"},
            "my-stack-db-1": project | {"com.docker.compose.service": "db"},  # not adopted
        }
    )
    with pytest.raises(LabError) as e:
        lab.check_opt_in()
    assert e.value.exit_code == 3
    assert str(e.value) == (
        "compose project 'my-stack' has not opted in to faults from lab 'team-stack': "
        'container(s) my-stack-embed-1 lack the label gameday.io/allow-faults: "team-stack"; '
        "nothing was touched\n"
        "  hint: add to each adopted service in your compose file\n"
        "    labels:\n"
        '      gameday.io/allow-faults: "team-stack"\n'
        "then recreate them (docker compose -p my-stack up -d)"
    )
    assert lab._client.calls == ["list {'label': ['com.docker.compose.project=my-stack']}"]


def test_a_namespace_without_the_lab_label_is_refused_with_how_to_opt_in(tmp_path: Path) -> None:
    lab = AdoptedKubernetesLab(load_inventory(write(tmp_path, KUBE)))
    other = SimpleNamespace(metadata=SimpleNamespace(labels={"gameday.io/lab": "staging"}))
    with pytest.raises(LabError) as e:
        lab.guard(other)
    assert e.value.exit_code == 3
    assert str(e.value) == (
        "namespace 'team-ml' has not opted in to faults from lab 'team-stack' (label "
        "gameday.io/lab=team-stack is 'staging'): gameday does not adopt deployment team-vllm "
        "there; nothing was touched\n"
        "  hint: kubectl label namespace team-ml gameday.io/lab=team-stack"
    )
    lab.guard(SimpleNamespace(metadata=SimpleNamespace(labels={"gameday.io/lab": "team-stack"})))
