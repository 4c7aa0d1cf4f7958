"""Loading an inventory: Ansible's YAML inventory format walked (groups, group vars, host
vars), every `gameday_*` variable validated with the line it came from, then the lab kind's own
rules (runner.labs.registry) on gameday_lab, on the hosts and on `gameday_lab.adopt:` (a
deployment the team already runs), each naming the field to fix.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel

from runner.errors import InventoryError, ScenarioError, plain_message
from runner.labs.common.adoption_rules import fail
from runner.labs.registry import entry
from runner.spec.actions import Restart
from runner.spec.inventory import ERA_ENV, HINT, Inventory, LabSpec, Loc, Node, Role
from runner.spec.scenario import LoadedScenario
from runner.spec.timing import TimeScale
from runner.spec.yamlsrc import Source, load
from vllmfacts.wording import Era

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
    "gameday_command": "command",
    "gameday_health_path": "health_path",
    "gameday_kubernetes_node": "kubernetes_node",
}


# what an adopted deployment's hosts may leave out: their engine runs as the team deployed it
_ADOPTED_DEFAULTS = {"role": Role.SERVING, "address": "0.0.0.0", "args": ()}


def load_inventory(path: Path) -> Inventory:
    # an inventory names the engine command a lab starts: another user's is refused
    src = load(path, InventoryError, "inventory", trusted=True)
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
    _check_kind(src, lab, nodes, walk.host_lines)
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
    kind = entry(lab.kind)
    kind.check_lab(src, lab)
    head = lab.engine_command[0] if lab.engine_command else ""
    if kind.engine_on_host and "/" in head and not head.startswith("/"):
        # beside the inventory, wherever the runner is started from (and in a --parallel
        # instance's own copy of the file, which lives elsewhere)
        program = str((path.parent / head).resolve())
        lab = lab.model_copy(update={"engine_command": (program, *lab.engine_command[1:])})
    return lab


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
    hosts, a restart's `nodes` hosts or groups; and its load's request timeout fits in the time
    the load may run on this lab. A ScenarioError names the scenario's file, line and field,
    and the inventory."""
    _check_load_timeout(ls, inventory)
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


def _check_load_timeout(ls: LoadedScenario, inventory: Inventory) -> None:
    """`load.timeout_s` is wall seconds (the HTTP client's clock, not scaled) and `load.max_s`
    real-world seconds (converted by the lab's time scale): a timeout longer than the load may
    run on this lab could never be seen, every hung request cut off unrecorded instead."""
    load_ = ls.scenario.load
    if load_ is None:
        return
    run_s = TimeScale.of(inventory.lab).to_lab(load_.max_s)
    if load_.timeout_s <= run_s:
        return
    loc = ("load", "timeout_s")
    raise ScenarioError(
        f"the request timeout ({load_.timeout_s:g} wall seconds, not scaled) is longer than the "
        f"load may run on the lab {inventory.path} (max_s {load_.max_s:g} real-world seconds "
        f"at time scale x{inventory.lab.time_scale:g}: {run_s:g} wall seconds)",
        file=ls.path,
        line=load(ls.path, ScenarioError, "scenario").line_of(loc),
        field=".".join(loc),
        hint="lower load.timeout_s, or raise load.max_s",
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


def _check_kind(
    src: Source, lab: LabSpec, nodes: Sequence[Node], host_lines: dict[str, tuple[Any, ...]]
) -> None:
    """The lab kind's own rules on the hosts (`gameday_service`, whether it can adopt at all),
    then on `adopt:`, each an InventoryError naming the field to fix."""
    kind = entry(lab.kind)
    kind.check_hosts(src, lab, nodes, host_lines)
    if lab.adopt is None:
        return
    if lab.monitoring is not None:
        loc = ("all", "vars", "gameday_lab", "monitoring")
        fail(
            src,
            loc,
            ".".join(loc),
            "an adopted deployment has no Prometheus that gameday runs: monitoring is for the "
            "labs gameday creates",
            "point gameday_lab.prometheus_url at your own Prometheus instead",
        )
    kind.check_adoption(src, lab, nodes, host_lines)
