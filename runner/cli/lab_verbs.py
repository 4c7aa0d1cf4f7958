"""`gameday lab ps|logs|restart|stop|start|config`: acting on a running lab by hand, whatever it
is made of (the local lab has no docker or kubectl to do it with).

These verbs take the lab as every command does (`--lab`, else $GAMEDAY_LAB, which a runbook's
`command` step gets, else the configuration's, see runner.spec.config). They run beside a
`gameday run` and write no journal: what they change is the lab's own state, which the run reads
back from the lab, and a run's cleanup restores the baseline. Each change they make is marked in
the lab's state (runner.drill.verb_log), so that a drill records it as a `gameday lab` verb's.
The argument checks and the change building are in runner.cli.lab_edits; this module is the
thin CLI layer over them.
"""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import click

from runner.cli import output
from runner.cli.lab_edits import (
    config_change,
    node_names,
    parse_arg_edits,
    parse_env_edits,
    process_of,
)
from runner.cli.options import handled, lab_option
from runner.drill import verb_log
from runner.errors import LabNotUp
from runner.labs import open_lab
from runner.labs.base import LabDriver, LogLine
from runner.labs.common.planning import describe_change
from runner.results.redact import redact, redact_env
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LogSource

FOLLOW_WAIT_S = 0.5  # longest wait for an event before `logs -f` reads the log again


def _open_up(lab_path: Path) -> LabDriver:
    """The lab's driver; LabNotUp (exit 3) when it is not up."""
    inventory = load_inventory(lab_path)
    driver = open_lab(inventory)
    if not driver.is_up():
        raise LabNotUp(
            f"lab {inventory.lab.name!r} is not up", hint=f"gameday lab up --lab {lab_path}"
        )
    return driver


@click.command("ps")
@lab_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per node, by name.")
@handled
def lab_ps(lab_path: Path, as_json: bool) -> None:
    """List the lab's nodes: role, status, readiness, restarts, generation, process, URL."""
    driver = _open_up(lab_path)
    states = driver.states()
    rows = {
        name: {
            "role": driver.inventory.node(name).role.value,
            "status": st.status.value,
            "ready": st.ready,
            "restarts": st.restarts,
            "generation": st.generation,
            "process": process_of(st),
            "url": driver.url(name),
        }
        for name, st in states.items()
    }
    if as_json:
        output.json_out(rows)
        return
    output.out.print(
        f"{'NODE':<10} {'ROLE':<8} {'STATUS':<14} {'READY':<6} {'RESTARTS':<9} "
        f"{'GEN':<4} {'PROCESS':<24} URL",
        markup=False,
    )
    for name, r in rows.items():
        output.out.print(
            f"{name:<10} {r['role']:<8} {r['status']:<14} {r['ready']!s:<6} "
            f"{r['restarts']!s:<9} {r['generation']!s:<4} {r['process']:<24} {r['url']}",
            markup=False,
        )


@click.command("logs")
@lab_option
@click.argument("node")
@click.option("--previous", is_flag=True, help="The last exited incarnation's log.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its UTC time.")
@handled
def lab_logs(lab_path: Path, node: str, previous: bool, follow: bool, timestamps: bool) -> None:
    """Print a node's log (its current incarnation's, or with --previous the last exited
    one's, like `kubectl logs --previous`). With -f, follow it across restarts until Ctrl-C
    (exit 0)."""
    driver = _open_up(lab_path)
    (name,) = node_names(driver.inventory, [node], groups=False)
    lines = driver.logs(name, LogSource.PREVIOUS if previous else LogSource.CURRENT)
    for ln in lines:
        _print_line(ln, timestamps)
    if follow:
        try:
            _follow(driver, name, lines, timestamps)
        except KeyboardInterrupt:
            return


def _follow(driver: LabDriver, node: str, shown: list[LogLine], timestamps: bool) -> None:
    """Print the node's lines that come after those `shown`, as they come. A node's output
    makes no lab event, so the log is read again after each wait; the wait ends at once on an
    event (a start, an exit), which is when a new incarnation's lines begin."""
    seq = driver.last_event_seq()
    since: datetime | None = shown[-1].ts if shown else None
    printed = sum(1 for ln in shown if ln.ts == since)  # lines shown that carry the stamp `since`
    while True:
        fresh = driver.logs_since(node, since)
        same = [ln for ln in fresh if ln.ts == since]
        new = [ln for ln in fresh if since is None or ln.ts > since]
        for ln in same[printed:] + new:
            _print_line(ln, timestamps)
        if new:
            since = new[-1].ts
            printed = sum(1 for ln in new if ln.ts == since)
        else:
            printed = max(printed, len(same))
        events = driver.wait_events(seq, FOLLOW_WAIT_S)
        seq = events[-1].seq if events else seq


def _print_line(ln: LogLine, timestamps: bool) -> None:
    text = f"{ln.ts.isoformat()} {ln.text}" if timestamps else ln.text
    output.out.print(text, markup=False, highlight=False, soft_wrap=True)


@click.command("restart")
@lab_option
@click.argument("names", nargs=-1, required=True, metavar="NODE|GROUP...")
@handled
def lab_restart(lab_path: Path, names: tuple[str, ...]) -> None:
    """Restart nodes together: all stopped, then all started. A group name from the inventory
    (tp_group) stands for all of its nodes."""
    driver = _open_up(lab_path)
    nodes = node_names(driver.inventory, list(names), groups=True)
    with verb_log.acting(driver.state_dir, "restart", nodes):
        driver.restart(nodes)
    output.message(f"restarted {', '.join(nodes)} together")


@click.command("stop")
@lab_option
@click.argument("node")
@handled
def lab_stop(lab_path: Path, node: str) -> None:
    """Stop a node and keep it stopped (no restart policy acts) until `gameday lab start`."""
    driver = _open_up(lab_path)
    (name,) = node_names(driver.inventory, [node], groups=False)
    with verb_log.acting(driver.state_dir, "stop", [name]):
        driver.stop(name)
    output.message(f"stopped {name}")


@click.command("start")
@lab_option
@click.argument("node")
@handled
def lab_start(lab_path: Path, node: str) -> None:
    """Start a node `gameday lab stop` stopped (a running node is left as it is)."""
    driver = _open_up(lab_path)
    (name,) = node_names(driver.inventory, [node], groups=False)
    with verb_log.acting(driver.state_dir, "start", [name]):
        driver.start(name)
    output.message(f"started {name}")


@click.command("config")
@lab_option
@click.argument("node")
@click.option(
    "--set-arg",
    "set_args",
    multiple=True,
    metavar="FLAG[=VALUE]",
    help="Set an engine flag (no value: a bare flag); model_tag=NAME sets the positional model.",
)
@click.option("--unset-arg", "unset_args", multiple=True, metavar="FLAG", help="Remove a flag.")
@click.option("--set-env", "set_env", multiple=True, metavar="NAME=VALUE", help="Set a variable.")
@click.option("--unset-env", "unset_env", multiple=True, metavar="NAME", help="Unset a variable.")
@click.option("--json", "as_json", is_flag=True, help="Print the configuration as JSON.")
@handled
def lab_config(
    lab_path: Path,
    node: str,
    set_args: tuple[str, ...],
    unset_args: tuple[str, ...],
    set_env: tuple[str, ...],
    unset_env: tuple[str, ...],
    as_json: bool,
) -> None:
    """Show a node's engine args and env (secrets masked), or change them: the node is
    re-applied (a new generation), as a scenario's set_args/set_env does."""
    driver = _open_up(lab_path)
    (name,) = node_names(driver.inventory, [node], groups=False)
    args = parse_arg_edits(driver.inventory, name, set_args, unset_args)
    env = parse_env_edits(set_env, unset_env)
    if args or env:
        change = config_change(driver, name, args, env)
        if change.before == change.after:
            output.message(f"{name}: no change (its configuration is already so)")
            return
        with verb_log.acting(driver.state_dir, "config", [name]):
            driver.apply(change)
        generation = driver.states()[name].generation
        output.message(f"re-applied {redact(describe_change(change))} (generation {generation})")
        return
    cfg = driver.config(name)
    shown_env = {k: redact(v) for k, v in redact_env(cfg.env).items()}
    if as_json:
        output.json_out({"args": [redact(a) for a in cfg.args], "env": shown_env})
        return
    output.out.print(f"args: {redact(shlex.join(cfg.args))}", markup=False, highlight=False)
    output.out.print("env:", markup=False)
    for k, v in sorted(shown_env.items()):
        output.out.print(f"  {k}={v}", markup=False, highlight=False)


VERBS = (lab_ps, lab_logs, lab_restart, lab_stop, lab_start, lab_config)
