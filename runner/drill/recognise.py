"""A person's actions, from the lab's events, whatever tool they used (`gameday lab`, `docker
restart`, `kubectl delete pod`): pure functions and one small state machine, fed events and the
node's configuration as read when each event was seen; nothing here touches a lab.

- a node stopped by someone (EXITED with `stopped`) then STARTED with the same configuration
  (or, as `kubectl delete pod` goes, STARTED then the old incarnation's stop): RESTART;
  several such restarts each within `window_s` of the one before, or exactly the nodes of a
  scenario's Restart step: GROUP_RESTART;
- APPLIED, or a STARTED with a configuration other than the one before: CONFIG_CHANGE (which
  args and env changed, secret values masked);
- a node stopped and not started again within `window_s`: STOP; a node started again after a
  STOP: START; a STARTED after the node exited by itself, not by its restart policy (no back-off
  announced it) or in a new generation: RESTART, as `gameday lab restart` of an exited node is;
- AUX_STOPPED: PROCESS_STOPPED.

A start that is no person's (its restart policy's, or gameday's own reported after the
hand-over) is kept in `others`, with who made it, for the record: never scored.

Then `match` finds the recovery step of the scenario an action carries out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from runner.labs.base import EventType, LabEvent, NodeConfig
from runner.labs.common.planning import edit_args
from runner.results.drill_record import ActionKind, Actor, ObservedAction
from runner.results.redact import MASK, redact, secret_name
from runner.spec.actions import Restart, Rollback, SetArgs, SetEnv, StopProcess
from runner.spec.expectations import RecoveryStep
from runner.spec.kinds import Outcome, RestartPolicy

GROUP_WINDOW_S = 2.0  # wall seconds between restarts of several nodes that make one group restart


@dataclass
class _Node:
    config: NodeConfig
    generation: int
    stopped_at: float | None = None  # someone stopped it (EXITED stopped), not started yet
    applied: bool = False  # APPLIED seen: the next start runs a new configuration
    backoff: bool = False  # its restart policy announced the next start
    policy_restarts: bool = False  # it failed, and its restart policy restarts a failure
    down_by_person: bool = False  # a STOP was recognised and no start since
    incarnation: int = 0  # the newest incarnation started


@dataclass
class Recogniser:
    """Feed it each lab event after the hand-over (`feed`) and call `tick` at least once a
    second: both return the actions recognised by then, in order. `groups`: node sets a
    scenario restarts together (a group restart of exactly those is recognised at once)."""

    configs: dict[str, NodeConfig]
    generations: dict[str, int]
    incarnations: dict[str, int] = field(default_factory=dict)
    groups: Sequence[frozenset[str]] = ()
    window_s: float = GROUP_WINDOW_S
    # each node's restart policy: a start after a failure it restarts is the policy's, even
    # when no back-off event announced it (Kubernetes restarts a first crash at once)
    policies: dict[str, RestartPolicy] = field(default_factory=dict)
    # the hand-over: a start the lab stamped before it (reported late: a Kubernetes watch, whose
    # stamps have whole seconds) is not a person's
    since: datetime | None = None
    # nodes their restart policy is restarting at the hand-over (crash-looping: the failure that
    # started it came before anyone watched), so their next start is the policy's
    restarting: frozenset[str] = frozenset()
    # the starts no person made, oldest first: the caller takes them (`take_others`)
    others: list[ObservedAction] = field(default_factory=list)
    _nodes: dict[str, _Node] = field(default_factory=dict)
    _restarts: dict[str, float] = field(default_factory=dict)  # node -> started at (pending)

    def __post_init__(self) -> None:
        self._nodes = {
            n: _Node(
                config=c,
                generation=self.generations.get(n, 0),
                incarnation=self.incarnations.get(n, 0),
                policy_restarts=n in self.restarting,
            )
            for n, c in self.configs.items()
        }

    def feed(self, e: LabEvent, at_s: float, config: NodeConfig | None) -> list[ObservedAction]:
        if e.type is EventType.AUX_STOPPED:
            detail = f"process {e.name} stopped"
            return [
                ObservedAction(
                    at_s=at_s, kind=ActionKind.PROCESS_STOPPED, nodes=(e.node,), detail=detail
                )
            ]
        n = self._nodes.get(e.node)
        if n is None:
            return []
        if e.type is EventType.EXITED:
            n.backoff = False
            policy = self.policies.get(e.node)
            n.policy_restarts = (
                not e.stopped and e.exit is not None and restarts_after(policy, e.exit.code)
            )
            # the stop of an incarnation older than the newest started (Kubernetes starts the
            # replacement of a deleted pod before the old one's container has exited) is part
            # of that start, not a stop of its own
            if e.stopped and (e.exit is None or e.exit.incarnation >= n.incarnation):
                n.stopped_at = at_s
        elif e.type is EventType.BACKOFF:
            n.backoff = True
        elif e.type is EventType.APPLIED:
            n.applied = True
        elif e.type is EventType.STARTED:
            return self._started(e, n, at_s, config or n.config)
        return []

    def _started(
        self, e: LabEvent, n: _Node, at_s: float, config: NodeConfig
    ) -> list[ObservedAction]:
        if e.incarnation is not None and e.incarnation <= n.incarnation:
            return []  # a start from before the hand-over, reported late
        before = self.since is not None and e.ts < self.since
        newer = e.generation is not None and e.generation > n.generation
        # a restart policy never changes a configuration: a change is someone's, whenever
        changed = n.applied or newer or config != n.config
        by_person = changed or (
            not before and (n.stopped_at is not None or not (n.backoff or n.policy_restarts))
        )
        policy = n.backoff or n.policy_restarts
        old = n.config
        applied = n.applied
        n.config, n.stopped_at, n.applied, n.backoff = config, None, False, False
        n.policy_restarts = False
        n.incarnation = max(n.incarnation, e.incarnation or 0)
        if e.generation is not None:
            n.generation = max(n.generation, e.generation)
        if not by_person:
            # its restart policy's, or (stamped before the hand-over, no failure before it)
            # gameday's own: the fault's injection, reported late
            actor = Actor.RESTART_POLICY if policy else Actor.RUNNER
            detail = "restarted by its restart policy" if policy else "started by gameday"
            self.others.append(
                ObservedAction(
                    at_s=at_s, kind=ActionKind.RESTART, nodes=(e.node,), detail=detail, actor=actor
                )
            )
            return []
        out = self.tick(at_s)
        if applied or config != old:
            out.append(
                ObservedAction(
                    at_s=at_s,
                    kind=ActionKind.CONFIG_CHANGE,
                    nodes=(e.node,),
                    detail=config_diff(old, config),
                )
            )
            return out
        if n.down_by_person:
            n.down_by_person = False
            out.append(
                ObservedAction(at_s=at_s, kind=ActionKind.START, nodes=(e.node,), detail="started")
            )
            return out
        self._restarts.setdefault(e.node, at_s)
        if frozenset(self._restarts) in self.groups:
            out += self._flush_restarts()
        return out

    def take_others(self) -> list[ObservedAction]:
        """The starts no person made since the last call."""
        out, self.others = self.others, []
        return out

    def tick(self, now_s: float) -> list[ObservedAction]:
        """What the passing of time settles: restarts grouped, stops not followed by a start."""
        out: list[ObservedAction] = []
        # a sliding window: `docker restart a b c d` restarts one container after the other
        if self._restarts and now_s - max(self._restarts.values()) >= self.window_s:
            out += self._flush_restarts()
        for name, n in self._nodes.items():
            if n.stopped_at is not None and now_s - n.stopped_at >= self.window_s:
                out.append(
                    ObservedAction(
                        at_s=n.stopped_at, kind=ActionKind.STOP, nodes=(name,), detail="stopped"
                    )
                )
                n.stopped_at, n.down_by_person = None, True
        return sorted(out, key=lambda a: a.at_s)

    def flush(self, now_s: float) -> list[ObservedAction]:
        """The end of watching: restarts pending their window are recognised now."""
        out = self.tick(now_s)
        return out + (self._flush_restarts() if self._restarts else [])

    def _flush_restarts(self) -> list[ObservedAction]:
        nodes = tuple(sorted(self._restarts))
        at_s = min(self._restarts.values())
        self._restarts = {}
        if len(nodes) == 1:
            return [
                ObservedAction(at_s=at_s, kind=ActionKind.RESTART, nodes=nodes, detail="restarted")
            ]
        return [
            ObservedAction(
                at_s=at_s,
                kind=ActionKind.GROUP_RESTART,
                nodes=nodes,
                detail=f"{len(nodes)} nodes restarted together",
            )
        ]


def restarts_after(policy: RestartPolicy | None, code: int) -> bool:
    """Whether a restart policy restarts a process that exited by itself with `code`."""
    return policy is RestartPolicy.ALWAYS or (policy is RestartPolicy.ON_FAILURE and code != 0)


def _shown(name: str, value: str | None) -> str:
    if value is None:
        return "(unset)"
    return MASK if secret_name(name) else redact(value)


def config_diff(before: NodeConfig, after: NodeConfig) -> str:
    """`args: A -> B; env: K: x -> y`, secret values masked; "no change" when equal."""
    parts: list[str] = []
    if before.args != after.args:
        parts.append(f"args: {redact(' '.join(before.args))} -> {redact(' '.join(after.args))}")
    for k in sorted(set(before.env) | set(after.env)):
        old, new = before.env.get(k), after.env.get(k)
        if old != new:
            parts.append(f"env: {k}: {_shown(k, old)} -> {_shown(k, new)}")
    return "; ".join(parts) or "re-applied, no change"


# ---- matching an action to the scenario's recovery steps ----

Resolve = Callable[[str], list[str]]  # a host or group name -> its node names


@dataclass(frozen=True)
class Configs:
    """What matching reads about configurations: each node's baseline and current one."""

    baseline: dict[str, NodeConfig]
    current: dict[str, NodeConfig]


def _carries_out(
    action: ObservedAction, step_action: object, resolve: Resolve, configs: Configs
) -> bool:
    nodes = set(action.nodes)
    if isinstance(step_action, Restart):
        wanted = {n for name in step_action.nodes for n in resolve(name)}
        return action.kind in (ActionKind.RESTART, ActionKind.GROUP_RESTART) and nodes == wanted
    if action.kind is ActionKind.CONFIG_CHANGE:
        if isinstance(step_action, SetArgs | SetEnv):
            targets = set(resolve(step_action.node))
            return bool(nodes & targets) and all(
                _holds(step_action, configs.current[n]) for n in nodes & targets
            )
        if isinstance(step_action, Rollback):
            return all(configs.current[n] == configs.baseline[n] for n in nodes)
    if isinstance(step_action, StopProcess):
        return (
            action.kind is ActionKind.PROCESS_STOPPED
            and action.detail == f"process {step_action.name} stopped"
            and nodes <= set(resolve(step_action.node))
        )
    return False


def _holds(step_action: SetArgs | SetEnv, config: NodeConfig) -> bool:
    """Whether the configuration already has the values the step sets (setting them again would
    change nothing)."""
    if isinstance(step_action, SetArgs):
        return tuple(edit_args(list(config.args), dict(step_action.args))) == config.args
    return all(config.env.get(k) == v for k, v in step_action.env.items())


def match(
    action: ObservedAction,
    steps: Sequence[RecoveryStep],
    resolve: Resolve,
    configs: Configs,
) -> ObservedAction:
    """The action with the first recovery step it carries out (any of the step's actions), and
    whether that step is a shortcut (`does_not_restore`, `masks`, or `forbidden`)."""
    for step in steps:
        if any(_carries_out(action, a, resolve, configs) for a in step.actions):
            shortcut = step.outcome is not Outcome.RESTORES or step.forbidden is not None
            return action.model_copy(
                update={
                    "step": step.name,
                    "outcome": step.outcome,
                    "shortcut": shortcut,
                    "why": (step.forbidden or step.why) if shortcut else step.why,
                }
            )
    return action


def together_groups(steps: Sequence[RecoveryStep], resolve: Resolve) -> list[frozenset[str]]:
    """The node sets the scenario's Restart steps restart (more than one node)."""
    out: list[frozenset[str]] = []
    for step in steps:
        for a in step.actions:
            if isinstance(a, Restart):
                nodes = frozenset(n for name in a.nodes for n in resolve(name))
                if len(nodes) > 1:
                    out.append(nodes)
    return out
