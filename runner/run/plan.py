"""`gameday plan` and `run --dry-run`: what a run would do, scenario by scenario, without touching
the lab (the driver is opened, never contacted: nothing is started, read or changed).

Changes to a node's engine configuration are shown against the configuration the inventory gives
the node (the state a run starts from, since a run starts from the lab's baseline), carried from
one action to the next in the order a run applies them: the baseline's setup first, so that the
injection is shown against the scenario's starting configuration.
"""

from __future__ import annotations

import json
from typing import Any, assert_never

from pydantic import BaseModel, ConfigDict

from runner.labs.base import Change, ChangeKind, LabDriver, NodeConfig
from runner.labs.capabilities import lacking
from runner.labs.common.planning import describe_change, edit_args
from runner.spec.actions import (
    MODEL_TAG,
    Action,
    ChangeAddress,
    Restart,
    Rollback,
    ScrapeTargets,
    ServiceLinks,
    SetArgs,
    SetEnv,
    Signal,
    StartProcess,
    StopProcess,
    Traffic,
    Wait,
)
from runner.spec.expectations import Pattern
from runner.spec.kinds import Window
from runner.spec.probes import Probe
from runner.spec.scenario import LoadedScenario, variant_notes
from runner.spec.timing import TimeScale
from runner.spec.usersteps import Command, Http, Playbook, describe_user_step


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ActionPlan(_Model):
    action: str  # describe_action's text
    change: str | None = None  # the engine configuration change, from the inventory's baseline


class StepPlan(_Model):
    name: str
    outcome: str
    why: str
    forbidden: str | None
    actions: list[ActionPlan]
    expect: list[str]
    settle: str | None


class ScenarioPlan(_Model):
    id: str
    title: str
    file: str
    lab: str
    lab_kind: str
    target: str
    not_on_this_lab: list[str]  # empty: the scenario runs on this lab
    setup: list[ActionPlan] = []  # the baseline's setup, applied before its probes
    baseline: list[str]
    inject: list[ActionPlan]
    expect: list[str]
    alerts: list[str]
    recover: list[StepPlan]
    verify: list[str]
    variants: list[str] = []  # which sections come from per_lab and per_vllm, and why


def _args(args: dict[str, Any]) -> str:
    def one(k: str, v: Any) -> str:
        if k == MODEL_TAG:
            return f"model {v}" if v is not None else "model removed"
        if v is None:
            return f"{k} removed"
        return k if v is True else f"{k} {v}"

    return ", ".join(one(k, v) for k, v in args.items())


def describe_action(action: Action) -> str:
    """One line that says what the action does, from the scenario alone."""
    match action:
        case SetArgs():
            return f"set_args on {action.node}: {_args(action.args)}"
        case SetEnv():
            env = ", ".join(
                f"{k}={v}" if v is not None else f"{k} unset" for k, v in action.env.items()
            )
            return f"set_env on {action.node}: {env}"
        case ServiceLinks():
            return (
                f"service_links on {action.node}: Service {action.service!r} port {action.port}, "
                f"enableServiceLinks {str(action.enabled).lower()}"
            )
        case Restart():
            how = " together" if action.together and len(action.nodes) > 1 else ""
            return f"restart {', '.join(action.nodes)}{how}"
        case Rollback():
            return "rollback: re-apply the lab's baseline"
        case Wait():
            return f"wait: {action.why}"
        case StartProcess():
            mib = f", {action.mib} MiB" if action.mib else ""
            mib += f", XID {int(action.xid)}" if action.xid is not None else ""
            return f"start_process on {action.node}: {action.name} ({action.program.value}{mib})"
        case StopProcess():
            return f"stop_process on {action.node}: {action.name}"
        case Signal():
            return f"signal {action.signal.value} to the {action.process} process of {action.node}"
        case Traffic():
            where = f" to {action.node}" if action.node else " to the target"
            return f"traffic{where}: {len(action.requests)} request(s)"
        case ChangeAddress():
            to = action.address or "the lab's next one (host number + 10)"
            return f"change_address on {action.node}: new {action.network} address {to}"
        case ScrapeTargets():
            return f"scrape_targets: Prometheus job {action.job} on the {action.network} network"
        case Command() | Playbook() | Http():
            undo = (
                f"; undo at cleanup: {describe_user_step(action.undo)}"
                if action.undo
                else "; no undo: cleanup re-applies the lab's baseline"
            )
            return describe_user_step(action) + undo
        case _:
            assert_never(action)


class _Configs:
    """Each node's engine configuration as the run's actions leave it, from the baseline."""

    def __init__(self, lab: LabDriver) -> None:
        self.lab = lab
        self.names = {n.name for n in lab.inventory.nodes}
        self.now: dict[str, NodeConfig] = {}

    def get(self, node: str) -> NodeConfig:
        return self.now.get(node) or self.lab.baseline_config(node)

    def apply(self, action: Action) -> ActionPlan:
        text = describe_action(action)
        if isinstance(action, Rollback):
            self.now.clear()
        if not isinstance(action, SetArgs | SetEnv) or action.node not in self.names:
            return ActionPlan(action=text)
        before = self.get(action.node)
        if isinstance(action, SetArgs):
            after = before.model_copy(
                update={"args": tuple(edit_args(list(before.args), action.args))}
            )
        else:
            env = {k: v for k, v in before.env.items() if k not in action.env}
            env |= {k: v for k, v in action.env.items() if v is not None}
            after = before.model_copy(update={"env": env})
        self.now[action.node] = after
        change = Change(kind=ChangeKind.NODE_CONFIG, node=action.node, before=before, after=after)
        return ActionPlan(action=text, change=describe_change(change))


def _probe(p: Probe) -> str:
    fields = p.model_dump(mode="json", exclude_defaults=True, exclude={"kind"})
    return f"{p.kind} " + " ".join(f"{k}={json.dumps(v)}" for k, v in fields.items())


def _pattern(p: Pattern) -> str:
    checks = [
        f"{name} {op} {json.dumps(v)}"
        for name, check in p.captures.items()
        for op, v in check.model_dump(mode="json", by_alias=True, exclude_none=True).items()
    ]
    return (
        f"/{p.regex}/"
        + (f" where {', '.join(checks)}" if checks else "")
        + (f" ({p.description})" if p.description else "")
    )


def _within(scale: TimeScale, seconds: float) -> str:
    return f"within {seconds:g} s real ({scale.to_lab(seconds):.3f} s on the lab)"


def _expect(ls: LoadedScenario, scale: TimeScale) -> list[str]:
    e = ls.scenario.expect
    out = [f"failure: {e.failure.value} on {ls.scenario.target}"]
    if e.signature is not None:
        out.append(f"signature in the {e.signature.source.value} log, in order:")
        out += [f"  {i}. {_pattern(p)}" for i, p in enumerate(e.signature.in_order, 1)]
        out += [f"  absent: {_pattern(p)}" for p in e.signature.absent]
    if e.exit_code is not None:
        out.append(f"exit code: {e.exit_code}")
    if e.state is not None:
        top = "" if e.state.max_restarts is None else f"-{e.state.max_restarts}"
        out.append(f"state: {e.state.status.value}, restarts {e.state.min_restarts}{top}")
    if e.phase is not None:
        out.append(f"phase reached: {e.phase.value}")
    out += [f"probe: {_probe(p)}" for p in e.probes]
    for n in e.elsewhere:
        pats = "; ".join(_pattern(p) for p in n.in_order)
        out.append(f"{n.node} logs ({n.source.value}) {_within(scale, n.within_s)}: {pats}")
    out.append(f"time to fail: {scale.describe(e.time_to_fail)}")
    return out


def _step(i: int, step: Any, configs: _Configs, scale: TimeScale) -> StepPlan:
    return StepPlan(
        name=f"{i}. {step.name}",
        outcome=step.outcome.value,
        why=" ".join(step.why.split()),
        forbidden=" ".join(step.forbidden.split()) if step.forbidden else None,
        actions=[configs.apply(a) for a in step.actions],
        expect=[_pattern(p) for p in step.expect.in_order] if step.expect else [],
        settle=f"settle {scale.describe(Window(max_s=step.settle_s))}" if step.settle_s else None,
    )


def plan_scenario(ls: LoadedScenario, lab: LabDriver) -> ScenarioPlan:
    """What a run of `ls` on `lab` would do (the lab is not contacted)."""
    ls = ls.for_lab(lab.kind, lab.inventory.lab.vllm_version, lab.inventory.lab.platform)
    sc, spec = ls.scenario, lab.inventory.lab
    scale = TimeScale.of(spec)
    if lab.kind in sc.labs:
        missing = lacking(sc, lab)
    else:
        missing = [f"not on this lab: applies to {', '.join(k.value for k in sc.labs)} only"]
    configs = _Configs(lab)
    setup = [configs.apply(a) for a in sc.baseline.setup]
    inject = [configs.apply(a) for a in sc.inject]
    return ScenarioPlan(
        id=sc.metadata.id,
        title=sc.metadata.title,
        file=str(ls.path),
        lab=spec.name,
        lab_kind=lab.kind.value,
        target=sc.target,
        not_on_this_lab=missing,
        setup=setup,
        baseline=[_probe(p) for p in sc.baseline.probes],
        inject=inject,
        expect=_expect(ls, scale),
        alerts=[
            f"{a.name} {_within(scale, a.within_s)}"
            + "".join(f" {k}={v}" for k, v in sorted(a.labels.items()))
            for a in sc.detect.alerts
        ],
        recover=[_step(i, s, configs, scale) for i, s in enumerate(sc.recover, 1)],
        verify=[f"probe: {_probe(p)}" for p in sc.verify.probes]
        + [f"time to recover: {scale.describe(sc.verify.time_to_recover)}"],
        variants=variant_notes(sc, lab.kind, spec.vllm_version, spec.platform),
    )


def render(p: ScenarioPlan) -> list[str]:
    """The plan as text lines."""
    head = f"{p.id} on lab {p.lab} ({p.lab_kind}): {p.title}"
    if p.not_on_this_lab:
        return [head, *(f"  {n}" for n in p.not_on_this_lab)]
    out = [head, f"  file: {p.file}", *(f"  {v}" for v in p.variants), "  baseline:"]
    if p.setup:
        out.append("    setup (journalled, undone at cleanup):")
        out += _actions(p.setup, "      ")
    out += [f"    probe: {b}" for b in p.baseline]
    out.append(f"  inject (target {p.target}):")
    out += _actions(p.inject, "    ")
    out += ["  expect:", *(f"    {e}" for e in p.expect)]
    out += ["  alerts:", *(f"    {a}" for a in p.alerts)] if p.alerts else ["  alerts: none"]
    out.append("  recover, in order:")
    for s in p.recover:
        out.append(f"    {s.name} [{s.outcome}]" + (f": {s.why}" if s.why else ""))
        if s.forbidden:
            out.append(f"      forbidden: {s.forbidden}")
        out += _actions(s.actions, "      ")
        out += [f"      shows: {e}" for e in s.expect]
        if s.settle:
            out.append(f"      {s.settle}")
    out += ["  verify:", *(f"    {v}" for v in p.verify)]
    return out


def _actions(actions: list[ActionPlan], indent: str) -> list[str]:
    out = []
    for a in actions:
        out.append(f"{indent}{a.action}")
        if a.change:
            out.append(f"{indent}  -> {a.change}")
    return out
