"""Planning a change is the same on every lab: read the subject's current state through the
driver, build the `Change` record towards the wanted one. Drivers differ only in how they read
(`config`, `current`) and apply (`apply`); the runner journals the record before applying it.

Also the lab's own plans a scenario relies on: the address a DHCP server hands a node next.
"""

from __future__ import annotations

from runner.errors import LabError
from runner.labs.base import (
    Capability,
    Change,
    ChangeKind,
    LabDriver,
    NodeConfig,
    ProcessState,
    Value,
)
from runner.labs.common.servicelinks import cluster_ip, kubernetes_service_env
from runner.spec.actions import (
    MODEL_TAG,
    ChangeAddress,
    ScrapeTargets,
    ServiceLinks,
    SetArgs,
    SetEnv,
    StartProcess,
    StopProcess,
)
from runner.spec.inventory import Node

PlannedAction = (
    SetArgs | SetEnv | ServiceLinks | StartProcess | StopProcess | ChangeAddress | ScrapeTargets
)


def subject(kind: ChangeKind, node: str, name: str = "") -> Change:
    """A template naming what a change is about, to read its current state or build a change
    towards a new one (before/after are placeholders)."""
    blank = Value(value="")
    return Change(kind=kind, node=node, subject=name, before=blank, after=blank)


def plan_change(lab: LabDriver, action: PlannedAction) -> Change:
    """The change that carries out `action` on this lab, from the state it reads now."""
    if isinstance(action, ServiceLinks):
        return service_links(lab, action.node, action.service, action.port, action.enabled)
    if isinstance(action, StartProcess):
        return start_process(lab, action.node, action.name, action.argv())
    if isinstance(action, StopProcess):
        return stop_process(lab, action.node, action.name)
    if isinstance(action, ChangeAddress):
        node = lab.inventory.node(action.node)
        address = action.address or dhcp_address(node, action.network)
        return set_address(lab, action.node, action.network, address)
    if isinstance(action, ScrapeTargets):
        return scrape_on(lab, action.job, action.network)
    before = lab.config(action.node)
    if isinstance(action, SetArgs):
        after = before.model_copy(update={"args": tuple(edit_args(list(before.args), action.args))})
    else:
        env = dict(before.env)
        for k, v in action.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        after = before.model_copy(update={"env": env})
    return Change(kind=ChangeKind.NODE_CONFIG, node=action.node, before=before, after=after)


def _note(lab: LabDriver, kind: ChangeKind, text: str) -> str:
    via = lab.applied_via(kind)
    return f"{text} ({via})" if via else text


def start_process(lab: LabDriver, node: str, name: str, command: list[str]) -> Change:
    probe = subject(ChangeKind.PROCESS, node, name)
    return probe.towards(
        ProcessState(running=True, command=lab.process_command(command)),
        lab.current(probe),
        _note(lab, ChangeKind.PROCESS, f"start {name} on {node}"),
    )


def stop_process(lab: LabDriver, node: str, name: str) -> Change:
    probe = subject(ChangeKind.PROCESS, node, name)
    cur = lab.current(probe)
    cmd = cur.command if isinstance(cur, ProcessState) else ()
    return probe.towards(
        ProcessState(running=False, command=cmd),
        cur,
        _note(lab, ChangeKind.PROCESS, f"stop {name} on {node}"),
    )


def set_address(lab: LabDriver, node: str, network: str, address: str) -> Change:
    probe = subject(ChangeKind.ADDRESS, node, network)
    return probe.towards(
        Value(value=address),
        lab.current(probe),
        _note(lab, ChangeKind.ADDRESS, f"{node} gets a new {network} address {address}"),
    )


def scrape_on(lab: LabDriver, job: str, network: str) -> Change:
    if lab.inventory.lab.monitoring is None:
        raise LabError("this lab has no monitoring (gameday_lab.monitoring)")
    probe = subject(ChangeKind.SCRAPE_TARGETS, "lab", job)
    return probe.towards(
        Value(value=network),
        lab.current(probe),
        f"Prometheus scrapes {job} on the {network} network",
    )


def service_links(lab: LabDriver, node: str, service: str, port: int, enabled: bool) -> Change:
    """On a lab with real Service links (Kubernetes), the pod spec's enableServiceLinks, checked
    against the Service the scenario names. Elsewhere, the variables the kubelet would inject for
    a Service of that name, injected (or removed) by the lab, and the report says so."""
    if Capability.SERVICE_LINKS in lab.capabilities:
        lab.check_service(service, port)
        before = lab.config(node)
        return Change(
            kind=ChangeKind.NODE_CONFIG,
            node=node,
            before=before,
            after=before.model_copy(update={"service_links": enabled}),
            note=f"pod spec enableServiceLinks: {str(enabled).lower()} (Service {service!r} "
            "exists in the lab's namespace; the kubelet injects its variables at container "
            "start)",
        )
    before = lab.config(node)
    injected = kubernetes_service_env(service, cluster_ip(service), port)
    env = {k: v for k, v in before.env.items() if k not in injected}
    if enabled:
        env |= injected
    verb = "injected" if enabled else "removed"
    note = (
        f"{lab.label} emulation: no Kubernetes here, so the lab {verb} the "
        f"{len(injected)} variables the kubelet injects for a Service named {service!r} "
        f"with enableServiceLinks: true ({', '.join(sorted(injected))})"
    )
    return Change(
        kind=ChangeKind.NODE_CONFIG,
        node=node,
        before=before,
        after=NodeConfig(args=before.args, env=env),
        note=note,
    )


def edit_args(args: list[str], edits: dict[str, str | int | float | bool | None]) -> list[str]:
    """Set, add or remove `--flag value` pairs (also `--flag=value`) in an engine command line;
    `model_tag` is the positional model, the command line's first word."""
    out = list(args)
    for flag, value in edits.items():
        if flag == MODEL_TAG:
            out = _set_model_tag(out, value)
            continue
        i = 0
        found = False
        while i < len(out):
            tok = out[i]
            if tok == flag or tok.startswith(flag + "="):
                has_value = tok == flag and i + 1 < len(out) and not out[i + 1].startswith("-")
                width = 2 if has_value else 1
                if value is None:
                    del out[i : i + width]
                    continue
                repl = [flag] if value is True else [flag, _arg(value)]
                out[i : i + width] = repl
                found = True
                i += len(repl)
                continue
            i += 1
        if not found and value is not None and value is not False:
            out += [flag] if value is True else [flag, _arg(value)]
    return out


def _set_model_tag(args: list[str], value: str | int | float | bool | None) -> list[str]:
    has = bool(args) and not args[0].startswith("-")
    rest = args[1:] if has else args
    return rest if value is None or value is False else [_arg(value), *rest]


def _arg(v: str | int | float | bool) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def describe_change(c: Change) -> str:
    b, a = c.before, c.after
    if isinstance(b, NodeConfig) and isinstance(a, NodeConfig):
        parts = []
        if b.args != a.args:
            parts.append(f"args {' '.join(b.args)} -> {' '.join(a.args)}")
        added = {k: v for k, v in a.env.items() if b.env.get(k) != v}
        removed = [k for k in b.env if k not in a.env]
        if added:
            parts.append("env set " + ", ".join(f"{k}={v}" for k, v in sorted(added.items())))
        if removed:
            parts.append("env unset " + ", ".join(sorted(removed)))
        if b.service_links != a.service_links:
            parts.append(f"enableServiceLinks {b.service_links} -> {a.service_links}")
        return f"{c.node}: " + ("; ".join(parts) or "no change")
    if isinstance(a, ProcessState):
        verb = "start" if a.running else "stop"
        return f"{c.node}: {verb} process {c.subject}" + (
            f" ({' '.join(a.command)})" if a.running else ""
        )
    if isinstance(b, Value) and isinstance(a, Value):
        what = "address" if c.kind is ChangeKind.ADDRESS else "scrape network for"
        return f"{c.node}: {c.subject} {what} {b.value} -> {a.value}"
    return f"{c.node}: {c.kind.value}"


def dhcp_address(node: Node, network: str) -> str:
    """The address the lab's DHCP server hands the node next: its configured host number + 10
    (wrapping within 1-254)."""
    configured = node.network_address(network)
    if configured is None:
        raise LabError(f"node {node.name} has no address on the {network} network")
    *net, host = configured.split(".")
    return ".".join([*net, str((int(host) + 10 - 1) % 254 + 1)])
