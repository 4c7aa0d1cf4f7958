"""One entry per lab kind: how to open it (and adopt with it), how `run --parallel` makes
instance k of it, the inventory rules only it has, and the optional abilities only some kinds
have (an image to build, manifests to print, an Alertmanager the host reaches).

Each kind declares its entry in its own package (`runner/labs/<kind>/kind.py`, `ENTRY`);
this module only finds it. Nothing outside `runner/labs/<kind>/` and this module switches on the
kind: a new kind is a new folder and a line in `_PACKAGES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runner.labs.base import LabDriver
from runner.labs.cost import InstanceCost
from runner.spec.inventory import Inventory, LabSpec, Node
from runner.spec.kinds import LabKind
from runner.spec.yamlsrc import Source

Progress = Callable[[str], None]
HostLines = Mapping[str, tuple[Any, ...]]  # host name -> where it is in the inventory file


class BuiltImage(Protocol):
    """What a kind's image build reports."""

    @property
    def image(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def built(self) -> bool: ...  # False: the cached image matched every input
    @property
    def base(self) -> str: ...
    @property
    def seconds(self) -> float: ...


def _no_lab_rule(src: Source, lab: LabSpec) -> None:
    return None


def _no_host_rule(src: Source, lab: LabSpec, nodes: Sequence[Node], hosts: HostLines) -> None:
    return None


@dataclass(frozen=True)
class LabKindEntry:
    """A lab kind. Its callables import their driver only when called: the compose and
    Kubernetes drivers pull in their clients."""

    kind: LabKind
    driver: Callable[[Inventory], LabDriver]
    # the driver of a deployment the team already runs (`gameday_lab.adopt:`); None: this kind
    # cannot adopt, and its check_hosts refuses `adopt:`
    adopted: Callable[[Inventory], LabDriver] | None
    # `run --parallel N`: refuse an N this kind cannot isolate; instance k >= 1's inventory
    check_instances: Callable[[Inventory, int], None]
    instance: Callable[[Inventory, int], Inventory]
    # where the runner's alert webhook receiver listens for this kind's Alertmanager
    receiver_listen: Callable[[Inventory], tuple[str, int]]
    # the inventory rules only this kind has, each an InventoryError naming the line and field:
    # on gameday_lab (right after it validates), on the hosts, and on `adopt:` when it is given
    check_lab: Callable[[Source, LabSpec], None] = _no_lab_rule
    # whether the engine runs on this machine: a relative path in engine_command then names a
    # program beside the inventory file (in a container or a pod it is the image's)
    engine_on_host: bool = False
    check_hosts: Callable[[Source, LabSpec, Sequence[Node], HostLines], None] = _no_host_rule
    check_adoption: Callable[[Source, LabSpec, Sequence[Node], HostLines], None] = _no_host_rule
    # the alerts API of the lab's own Alertmanager where the host reaches it (None: it is not
    # reachable from the host, as inside a cluster)
    alertmanager_api: Callable[[Inventory], str | None] | None = None
    # `gameday lab build`: the lab's image (None: nothing to build)
    build: Callable[[Inventory, Progress, bool], BuiltImage] | None = None
    # `gameday lab manifests`: what `lab up` applies, or (True) what scenarios create, as YAML
    manifests: Callable[[Inventory, bool], str] | None = None
    # whether `run --parallel`'s instances share this machine's cores (False: they run on a
    # cluster's nodes), so that the machine limits how many run at once (runner/run/capacity.py)
    instances_share_host: bool = True
    # what one instance takes on this machine, measured by bench/instance_cost.py (None: its
    # instances do not run here)
    instance_cost: InstanceCost | None = None

    def open(self, inventory: Inventory) -> LabDriver:
        if inventory.lab.adopt is not None and self.adopted is not None:
            return self.adopted(inventory)
        return self.driver(inventory)


_PACKAGES = {
    LabKind.LOCAL: "runner.labs.local.kind",
    LabKind.COMPOSE: "runner.labs.compose.kind",
    LabKind.KUBERNETES: "runner.labs.kubernetes.kind",
}


def entry(kind: LabKind) -> LabKindEntry:
    found = importlib.import_module(_PACKAGES[kind]).ENTRY
    assert isinstance(found, LabKindEntry) and found.kind is kind
    return found
