"""The compose lab's node configs and generations, kept in its state directory: the configs a
scenario set (configs.json) and the Compose override file that applies them, and each node's
generation (1 until the lab re-applies or restarts it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from ipaddress import IPv4Network
from pathlib import Path
from typing import Any

import yaml

from runner.errors import LabError
from runner.fsutil import write_private
from runner.labs.base import NodeConfig
from runner.labs.common.alertmanager_config import receiver_given
from runner.labs.common.alertmanager_config import receiver_listen as common_receiver_listen
from runner.spec.inventory import Inventory

RECEIVER_PORT = 9095  # the runner's alert receiver on the management network's gateway


class ConfigFiles:
    """The state directory's files for node configs and generations."""

    def __init__(self, state_dir: Path) -> None:
        self.override_path = state_dir / "compose.override.yaml"
        self.configs_path = state_dir / "configs.json"
        self.generations_path = state_dir / "generations.json"

    def clear(self) -> None:
        """Back to the compose file's configs (the generations stay)."""
        self.override_path.unlink(missing_ok=True)
        self.configs_path.unlink(missing_ok=True)

    def remove(self) -> None:
        self.clear()
        self.generations_path.unlink(missing_ok=True)

    def generations(self) -> dict[str, int]:
        """Each node's generation (1 until the lab re-applies or restarts it)."""
        if not self.generations_path.exists():
            return {}
        return {k: int(v) for k, v in json.loads(self.generations_path.read_text()).items()}

    def generation(self, node: str) -> int:
        return self.generations().get(node, 1)

    def bump_generation(self, nodes: Sequence[str]) -> None:
        gens = self.generations()
        for n in nodes:
            gens[n] = int(gens.get(n, 1)) + 1
        write_private(self.generations_path, json.dumps(gens))

    def configs(self) -> dict[str, NodeConfig]:
        """The nodes whose config differs from their baseline, and that config."""
        if not self.configs_path.exists():
            return {}
        saved = json.loads(self.configs_path.read_text())
        return {k: NodeConfig.model_validate(v) for k, v in saved.items()}

    def save(
        self,
        configs: dict[str, NodeConfig],
        program: Callable[[str], Sequence[str]],
        baseline: Callable[[str], NodeConfig],
    ) -> None:
        """Record `configs` and write the override file that applies them (`program`: what a
        node's args follow)."""
        self._write_override(configs, program, baseline)
        write_private(
            self.configs_path,
            json.dumps({k: v.model_dump(mode="json") for k, v in configs.items()}),
        )

    def _write_override(
        self,
        configs: dict[str, NodeConfig],
        program: Callable[[str], Sequence[str]],
        baseline: Callable[[str], NodeConfig],
    ) -> None:
        if not configs:
            self.override_path.unlink(missing_ok=True)
            return
        services: dict[str, Any] = {}
        for node, cfg in configs.items():
            missing = sorted(set(baseline(node).env) - set(cfg.env))
            if missing:
                raise LabError(
                    f"the compose lab cannot unset {node}'s baseline variables {missing} "
                    "(Compose merges environments)"
                )
            services[node] = {
                "command": [*program(node), *cfg.args],
                "environment": dict(cfg.env),
            }
        doc = {"version": "2.4", "services": services}
        write_private(  # it holds the nodes' environments: owner-only
            self.override_path,
            "# written by gameday: the nodes whose config a scenario changed\n"
            + yaml.safe_dump(doc, sort_keys=False),
        )


def config_of(
    container: Any, engine_command: Sequence[str], image_env: dict[str, str]
) -> NodeConfig:
    """The engine container's actual command and environment (the lab's own GAMEDAY_*
    variables and the image's defaults left out)."""
    cmd = list(container.attrs["Config"]["Cmd"] or [])
    prefix = list(engine_command)
    args = cmd[len(prefix) :] if cmd[: len(prefix)] == prefix else cmd
    env = {}
    for item in container.attrs["Config"].get("Env") or []:
        k, _, v = item.partition("=")
        if k.startswith("GAMEDAY_") or image_env.get(k) == v:
            continue
        env[k] = v
    return NodeConfig(args=tuple(args), env=env)


def receiver_listen(inventory: Inventory) -> tuple[str, int]:
    """Where the runner's webhook receiver listens for a compose lab: the inventory's address,
    else the management network's gateway (the host's own address on the lab's bridge); without
    a compose section, beside its Prometheus as on the other kinds."""
    if inventory.lab.compose is None:
        return common_receiver_listen(inventory)
    given = receiver_given(inventory)
    if given is not None:
        return given
    # compose.yaml gives each network the gateway x.x.x.254: the host's address on it
    subnet = IPv4Network(inventory.lab.compose.subnets["management"])
    return str(subnet.broadcast_address - 1), RECEIVER_PORT
