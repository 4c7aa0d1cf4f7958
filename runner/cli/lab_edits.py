"""What `gameday lab` verbs (runner.cli.lab_verbs) check and build before they act on a lab:
node and group names against the inventory, engine flags against the lab engine's own parser
and variables against vLLM's list (as `validate` checks a scenario's, runner.spec.checks), and the
`Change` a `lab config` makes, through the same planning a scenario's set_args and set_env go
through (runner.labs.common.planning)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from runner.errors import InputError
from runner.labs.base import Change, ChangeKind, LabDriver, NodeConfig, NodeState
from runner.labs.common.planning import plan_change
from runner.spec.actions import MODEL_TAG, SetArgs, SetEnv
from runner.spec.checks import engine_flags
from runner.spec.inventory import Inventory
from vllmfacts.envs import KNOWN

ArgEdits = dict[str, str | int | float | bool | None]
EnvEdits = dict[str, str | None]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ALL = "all"  # Ansible's group of every host


def _did_you_mean(name: str, known: Sequence[str], otherwise: str, cutoff: float = 0.6) -> str:
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=cutoff)
    return f"did you mean {near[0]!r}?" if near else otherwise


def node_names(inventory: Inventory, names: Sequence[str], *, groups: bool) -> list[str]:
    """The nodes `names` stand for, in order and once each: a node's name, or (with `groups`)
    an inventory group's name for all of its nodes. InputError (exit 2) for any other name."""
    nodes = [n.name for n in inventory.nodes]
    group_names = sorted({g for n in inventory.nodes for g in n.groups} | {ALL})
    out: list[str] = []
    for name in names:
        if name in nodes:
            hits = [name]
        elif groups and name == ALL:
            hits = nodes
        elif groups and name in group_names:
            hits = [n.name for n in inventory.resolve(name)]
        else:
            known = nodes + (group_names if groups else [])
            what = "node or group" if groups else "node"
            raise InputError(
                f"no {what} {name!r} in the lab",
                file=inventory.path,
                hint=_did_you_mean(name, known, f"its nodes: {', '.join(nodes)}"),
            )
        out += [h for h in hits if h not in out]
    return out


def _check_flag(flag: str, option: str) -> None:
    if flag == MODEL_TAG:
        return
    flags = engine_flags()
    spelled = "--" + flag.lstrip("-").replace("_", "-") if flag.startswith("--") else flag
    if spelled not in flags:
        raise InputError(
            f"{flag!r} is not a flag of vllm serve",
            field=option,
            hint=_did_you_mean(spelled, list(flags), "see `vllm-lab serve --help` for its flags"),
        )


def parse_arg_edits(
    inventory: Inventory, node: str, set_args: Sequence[str], unset_args: Sequence[str]
) -> ArgEdits:
    """`--set-arg FLAG[=VALUE]` (no value: a bare flag; `model_tag=NAME`: the positional
    model) and `--unset-arg FLAG` as a set_args mapping, each flag checked against the lab
    engine's parser."""
    edits: ArgEdits = {}
    for item in set_args:
        flag, eq, value = item.partition("=")
        _check_flag(flag, "--set-arg")
        if flag == MODEL_TAG and not value:
            raise InputError(
                f"{item!r}: the model needs a name",
                field="--set-arg",
                hint=f"--set-arg {MODEL_TAG}=Qwen/Qwen2.5-0.5B-Instruct",
            )
        edits[flag] = value if eq else True
    for flag in unset_args:
        _check_flag(flag, "--unset-arg")
        edits[flag] = None
    args = inventory.node(node).args
    if "--model" in edits and args and not args[0].startswith("-"):
        raise InputError(
            f"--model does nothing on {node}: its command line names the model as "
            "`vllm serve MODEL`, which wins",
            field="--set-arg",
            hint=f"--set-arg {MODEL_TAG}=NAME sets the positional model",
        )
    return edits


def parse_env_edits(set_env: Sequence[str], unset_env: Sequence[str]) -> EnvEdits:
    """`--set-env NAME=VALUE` and `--unset-env NAME` as a set_env mapping; a near miss of a
    vLLM variable is refused (vLLM would ignore it with a warning)."""
    edits: EnvEdits = {}
    for item, option in [(x, "--set-env") for x in set_env] + [
        (x, "--unset-env") for x in unset_env
    ]:
        name, eq, value = item.partition("=")
        if not _ENV_NAME.match(name) or (option == "--set-env") != bool(eq):
            form = "NAME=VALUE" if option == "--set-env" else "NAME"
            raise InputError(f"{item!r} is not {form}", field=option)
        if name.startswith("VLLM_") and name not in KNOWN:
            near = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.85)
            if near:
                raise InputError(
                    f"{name!r} is not a vLLM variable",
                    field=option,
                    hint=f"did you mean {near[0]!r}?",
                )
        edits[name] = value if option == "--set-env" else None
    return edits


def config_change(lab: LabDriver, node: str, args: ArgEdits, env: EnvEdits) -> Change:
    """One node-config change carrying both the arg and the env edits (one re-apply), planned
    as a scenario's set_args and set_env are."""
    planned = []
    if args:
        planned.append(plan_change(lab, SetArgs(kind="set_args", node=node, args=args)))
    if env:
        planned.append(plan_change(lab, SetEnv(kind="set_env", node=node, env=env)))
    first, last = planned[0], planned[-1]
    after = first.after
    if isinstance(after, NodeConfig) and isinstance(last.after, NodeConfig):
        after = after.model_copy(update={"env": last.after.env})
    return Change(
        kind=ChangeKind.NODE_CONFIG,
        node=node,
        before=first.before,
        after=after,
        note=f"gameday lab config {node}",
    )


def process_of(state: NodeState) -> str:
    """What runs the node now: its process id, or on Kubernetes its pod ("-": nothing)."""
    if state.pid is not None:
        return f"pid {state.pid}"
    if state.pod is not None:
        return f"pod {state.pod}"
    return "-"
