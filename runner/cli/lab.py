"""`gameday lab`: bring a lab up or down, build its image, print its manifests, show its
state. A thin layer over runner.labs, like the rest of runner.cli."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli import output
from runner.cli.options import handled, lab_option
from runner.errors import InputError, LabError, LeftoversError
from runner.labs import open_lab, wait_all_ready
from runner.labs.registry import entry
from runner.run import journal
from runner.spec.inventory_load import load_inventory
from runner.spec.timing import TimeScale


@click.group()
def lab() -> None:
    """Bring a lab up or down, or show its state."""


@lab.command("up")
@lab_option
@click.option(
    "--readopt",
    is_flag=True,
    help="An adopted deployment the team deployed anew since gameday adopted it: take what it "
    "runs now as its baseline (gameday otherwise refuses to touch it).",
)
@handled
def lab_up(lab_path: Path, readopt: bool) -> None:
    """Start the lab and wait until every node serves. An adopted deployment (gameday_lab.adopt)
    is not started: it must be running and opted in; its baseline is saved."""
    inventory = load_inventory(lab_path)
    driver = open_lab(inventory)
    was_up = driver.is_up()
    if readopt:
        if journal.open_changes(driver.state_dir) or journal.open_steps(driver.state_dir):
            raise LeftoversError(
                f"lab {inventory.lab.name!r} has changes left by an interrupted run: "
                "re-adopting now would take them for the team's",
                hint=f"gameday cleanup --lab {lab_path}, then lab up --readopt",
            )
        again = driver.redeployed()
        driver.readopt()
        if again:
            output.message(
                f"lab {inventory.lab.name!r} re-adopted {', '.join(again)}: what runs now is "
                "the baseline"
            )
    driver.up()
    try:
        spec = inventory.lab
        states = wait_all_ready(driver, TimeScale.of(spec).boot_timeout_lab(spec))
        driver.monitoring_ready(60)
    except LabError:
        if not was_up:  # a lab that cannot come up is not left half-up
            driver.down()
        raise
    output.message(
        f"lab {inventory.lab.name!r} is up: " + ", ".join(f"{n} {driver.url(n)}" for n in states)
    )


@lab.command("build")
@lab_option
@click.option("--force", is_flag=True, help="Rebuild even when the cached image matches.")
@handled
def lab_build(lab_path: Path, force: bool) -> None:
    """Build the compose lab's image (offline-capable; cached by its inputs)."""
    inventory = load_inventory(lab_path)
    build = entry(inventory.lab.kind).build
    if build is None:
        raise InputError(
            f"lab {inventory.lab.name!r} is a {inventory.lab.kind.value} lab: it has no images",
            file=lab_path,
            hint="gameday lab build --lab inventories/compose.yaml",
        )
    result = build(inventory, output.message, force)
    what = "built" if result.built else "cached (inputs unchanged)"
    output.message(
        f"image {result.image} = {result.tag}: {what} in {result.seconds:.1f} s "
        f"(base {result.base})"
    )


@lab.command("manifests")
@lab_option
@click.option(
    "--scenario-objects",
    is_flag=True,
    help="Print instead what scenarios create on the lab (a stray GPU pod), for reading: its "
    "nodeName is the target's node when it runs.",
)
@handled
def lab_manifests(lab_path: Path, scenario_objects: bool) -> None:
    """Print the Kubernetes manifests `lab up` applies (kubectl apply -f - takes them), its
    Prometheus's with the inventory's monitoring (a Secret's token masked). With
    gameday_lab.kubernetes.group_workload: leaderworkerset, each tensor-parallel group is one
    LeaderWorkerSet (manifests only; docs/labs/kubernetes.md)."""
    inventory = load_inventory(lab_path)
    manifests = entry(inventory.lab.kind).manifests
    if manifests is None:
        raise InputError(
            f"lab {inventory.lab.name!r} is a {inventory.lab.kind.value} lab: it has no "
            "Kubernetes manifests",
            file=lab_path,
            hint="gameday lab manifests --lab inventories/eks.yaml",
        )
    text = manifests(inventory, scenario_objects)
    flag = " --scenario-objects" if scenario_objects else ""
    output.out.print(
        f"# gameday lab manifests{flag} --lab {lab_path}\n" + text, markup=False, end=""
    )


@lab.command("down")
@lab_option
@handled
def lab_down(lab_path: Path) -> None:
    """Stop the lab's nodes and its supervisor. An adopted deployment is let go, still
    running: gameday removes nothing of it."""
    inventory = load_inventory(lab_path)
    open_lab(inventory).down()
    adopt = inventory.lab.adopt
    if adopt is None:
        output.message(f"lab {inventory.lab.name!r} is down")
        return
    what = f"compose project {adopt.project!r}" if adopt.project else " ".join(adopt.workload or ())
    output.message(
        f"lab {inventory.lab.name!r} let go of {what}: it is still running "
        "(gameday neither creates nor removes an adopted deployment)"
    )


@lab.command("status")
@lab_option
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@handled
def lab_status(lab_path: Path, as_json: bool) -> None:
    """Show each node's state. Exit 3 when the lab is not up."""
    inventory = load_inventory(lab_path)
    driver = open_lab(inventory)
    if not driver.is_up():
        raise LabError(
            f"lab {inventory.lab.name!r} is not up", hint=f"gameday lab up --lab {lab_path}"
        )
    states = driver.states()
    if as_json:
        output.json_out({n: s.model_dump(mode="json") for n, s in states.items()})
        return
    for n, s in states.items():
        last = f", last exit {s.last_exit.code}" if s.last_exit else ""
        output.out.print(
            f"{n:<12} {s.status.value:<14} ready={s.ready!s:<5} "
            f"restarts={s.restarts}{last}  {driver.url(n)}"
        )


def _add_verbs() -> None:
    from runner.cli.lab_verbs import VERBS

    for verb in VERBS:
        lab.add_command(verb)


_add_verbs()
