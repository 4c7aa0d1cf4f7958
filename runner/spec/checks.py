"""What `validate` checks beyond the format: the engine flags and environment names a scenario
sets are ones the engine knows (from the lab engine's own argument parser and variable list, with
"did you mean"), and no two scenario files share an id."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from runner.errors import ScenarioError
from runner.spec.actions import MODEL_TAG, Action, SetArgs, SetEnv
from runner.spec.expectations import RecoveryStep
from runner.spec.inventory import Inventory
from runner.spec.scenario import LabVariant, LoadedScenario
from runner.spec.yamlsrc import load
from vllmfacts.envs import KNOWN
from vllmfacts.serveflags import add_serve_arguments
from vllmfacts.wording import Era


def engine_flags() -> set[str]:
    """Every option string `vllm serve` takes, as the lab engine parses them."""
    p = argparse.ArgumentParser(add_help=False)
    add_serve_arguments(p, Era.V0_19)
    return {s for a in p._actions for s in a.option_strings}


def _edits(ls: LoadedScenario) -> Iterator[tuple[tuple[Any, ...], SetArgs | SetEnv]]:
    """Every set_args and set_env of the scenario, its per_lab, per_vllm and per_platform sections
    included."""
    sc = ls.scenario
    yield from _edits_in((), sc.baseline.setup, sc.inject, sc.recover)
    variants: list[tuple[tuple[Any, ...], LabVariant]] = [
        (("per_lab", k.value), v) for k, v in sc.per_lab.items()
    ]
    for version, entry in sc.per_vllm.items():
        variants.append((("per_vllm", str(version)), entry))
        variants += [
            (("per_vllm", str(version), "per_lab", k.value), v) for k, v in entry.per_lab.items()
        ]
    variants += [(("per_platform", p.value), v) for p, v in sc.per_platform.items()]
    for at, variant in variants:
        setup = variant.baseline.setup if variant.baseline else []
        yield from _edits_in(at, setup, variant.inject or [], variant.recover or [])


def _edits_in(
    at: tuple[Any, ...],
    setup: Sequence[Action],
    inject: Sequence[Action],
    recover: Sequence[RecoveryStep],
) -> Iterator[tuple[tuple[Any, ...], SetArgs | SetEnv]]:
    for i, action in enumerate(setup):
        if isinstance(action, SetArgs | SetEnv):
            yield (*at, "baseline", "setup", i), action
    for i, action in enumerate(inject):
        if isinstance(action, SetArgs | SetEnv):
            yield (*at, "inject", i), action
    for i, step in enumerate(recover):
        for j, action in enumerate(step.actions):
            if isinstance(action, SetArgs | SetEnv):
                yield (*at, "recover", i, "actions", j), action
        for j, action in enumerate(step.reveal):
            if isinstance(action, SetArgs | SetEnv):
                yield (*at, "recover", i, "reveal", j), action


def check_engine_names(ls: LoadedScenario, inventory: Inventory | None = None) -> None:
    """ScenarioError (file, line, field, "did you mean") for a flag the engine does not take, or
    a vLLM variable that is a near miss of a known one. Any other unknown VLLM_* name is allowed:
    vLLM only warns about it, and a scenario may set one to show that warning. With the lab's
    inventory: `--model` on a node whose command line has a positional model, which wins."""
    flags = engine_flags()
    for loc, action in _edits(ls):
        if isinstance(action, SetArgs):
            if "--model" in action.args and _positional(inventory, action.node):
                raise _error(
                    ls,
                    (*loc, "args", "--model"),
                    f"--model does nothing on {action.node}: its command line names the model "
                    "as `vllm serve MODEL`, which wins",
                    hint=f"set `{MODEL_TAG}` (the positional model) instead",
                )
            for key in action.args:
                flag = "--" + key.lstrip("-").replace("_", "-") if key.startswith("--") else key
                if key == MODEL_TAG or flag in flags:
                    continue
                near = difflib.get_close_matches(flag, flags, n=1)
                hint = _did_you_mean(near, "see `vllm-lab serve --help` for its flags")
                raise _error(
                    ls, (*loc, "args", key), f"{key!r} is not a flag of vllm serve", hint=hint
                )
        else:
            for name in action.env:
                if not name.startswith("VLLM_") or name in KNOWN:
                    continue
                near = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.85)
                if near:
                    message = f"{name!r} is not a vLLM variable"
                    raise _error(ls, (*loc, "env", name), message, hint=_did_you_mean(near, ""))


def _positional(inventory: Inventory | None, node: str) -> bool:
    found = [n for n in inventory.nodes if n.name == node] if inventory is not None else []
    return bool(found) and bool(found[0].args) and not found[0].args[0].startswith("-")


def _did_you_mean(near: list[str], otherwise: str) -> str:
    return f"did you mean {near[0]!r}?" if near else otherwise


def _error(ls: LoadedScenario, loc: tuple[Any, ...], message: str, *, hint: str) -> ScenarioError:
    return ScenarioError(
        message,
        file=ls.path,
        line=load(ls.path, ScenarioError, "scenario").line_of(loc),
        field=".".join(map(str, loc)),
        hint=hint,
    )


def check_unique_ids(loaded: list[LoadedScenario]) -> None:
    """ScenarioError naming both files when two scenarios share an id."""
    seen: dict[str, Path] = {}
    for ls in loaded:
        sid = ls.scenario.metadata.id
        if sid in seen:
            raise ScenarioError(
                f"scenario id {sid!r} is also the id of {seen[sid]}",
                file=ls.path,
                line=load(ls.path, ScenarioError, "scenario").line_of(("metadata", "id")),
                field="metadata.id",
                hint="give each scenario its own id",
            )
        seen[sid] = ls.path
