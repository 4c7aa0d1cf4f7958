"""`gameday run --parallel N`: the scenarios spread over N isolated instances of one lab, each
worker taking the next scenario when it is free, with one merged report.

An instance is the inventory's lab moved out of the way of the others: instance k (1..N-1; 0 is
the inventory as written) of a local lab has every loopback address 127.0.x.y as 127.k.x.y (all
of 127/8 is the loopback interface), so its nodes, exporters and Prometheus listen on the same
ports without meeting; its name (hence its state directory and journal) is `<name>-p<k>`.
"""

from __future__ import annotations

import ctypes
import ipaddress
import queue
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from runner.errors import InputError
from runner.fsutil import write_private
from runner.inventory import ComposeSpec, Inventory, load_inventory
from runner.labs.local.driver import default_state_root
from runner.run import CLEANING, shielded_from_sigint
from runner.scenario import LabKind, LoadedScenario

MAX_PARALLEL = 64
_IPV4 = re.compile(r"\b127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")


def check_parallel(inventory: Inventory, n: int) -> None:
    if not 1 <= n <= MAX_PARALLEL:
        raise InputError(f"--parallel must be 1..{MAX_PARALLEL}, not {n}", field="--parallel")
    if n == 1:
        return
    if inventory.lab.kind is LabKind.COMPOSE:
        spec = inventory.lab.compose or ComposeSpec()
        top = max(int(s.split(".")[2]) for s in spec.subnets.values())
        if top + len(spec.subnets) * (n - 1) > 254:
            raise InputError(
                f"--parallel {n} would move the compose lab's networks past x.x.254.0/24 "
                f"(each instance takes the next {len(spec.subnets)} /24s)",
                file=inventory.path,
                field="gameday_lab.compose.subnets",
                hint="use fewer instances, or lower /24s",
            )
        return
    if inventory.lab.kind is not LabKind.LOCAL:
        raise InputError(
            f"--parallel runs isolated instances of the local or the compose lab; lab "
            f"{inventory.lab.name!r} is a {inventory.lab.kind.value} lab, which runs one "
            f"instance in this version",
            file=inventory.path,
            field="--parallel",
            hint="drop --parallel, or use inventories/local.yaml or inventories/compose.yaml",
        )
    for node in inventory.nodes:
        for addr in (node.address, node.management_address, node.overlay_address):
            if addr and not ipaddress.ip_address(addr).is_loopback:
                raise InputError(
                    f"--parallel moves loopback addresses; host {node.name} has {addr}",
                    file=inventory.path,
                    field=f"{node.name}.gameday_address",
                )


def _move(value: Any, k: int) -> Any:
    """Every 127.0.x.y in a value (strings, lists, dicts, models' dumps) as 127.k.x.y."""
    if isinstance(value, str):
        return _IPV4.sub(lambda m: f"127.{k}.{m.group(2)}.{m.group(3)}", value)
    if isinstance(value, list | tuple):
        return type(value)(_move(v, k) for v in value)
    if isinstance(value, dict):
        return {key: _move(v, k) for key, v in value.items()}
    return value


def instance(inventory: Inventory, k: int) -> Inventory:
    """Instance k of a local or compose lab (k = 0 is the inventory itself)."""
    if k == 0:
        return inventory
    if inventory.lab.kind is LabKind.COMPOSE:
        return _compose_instance(inventory, k)
    data = inventory.model_dump()
    moved = _move({"lab": data["lab"], "nodes": data["nodes"]}, k)
    moved["lab"]["name"] = f"{inventory.lab.name}-p{k}"
    if inventory.lab.state_dir:
        moved["lab"]["state_dir"] = f"{inventory.lab.state_dir}-p{k}"
    return Inventory.model_validate({"path": inventory.path, **moved})


def _compose_instance(inventory: Inventory, k: int) -> Inventory:
    """Instance k of a compose lab: a separate Compose project `<project>-p<k>` (its containers
    `<project>-p<k>-<service>`, its networks and volumes its own), each network's /24 moved up by
    k times the number of networks (172.30.80/81 -> 172.30.82/83 for k = 1), each published port
    up by 100 k. Host actions are Ansible plays on a real inventory, so the instance's inventory
    is written out, beside its state, and loaded from there."""
    spec = inventory.lab.compose or ComposeSpec()
    nets = [s.split("/")[0].rsplit(".", 1)[0] for s in spec.subnets.values()]
    moves = {
        f"{net}.": f"{net.rsplit('.', 1)[0]}.{int(net.rsplit('.', 1)[1]) + len(nets) * k}."
        for net in nets
    }
    subnet_re = re.compile(r"(?<![\d.])(?:" + "|".join(map(re.escape, moves)) + r")(?=\d)")
    project = spec.project

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: move(v) for key, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if not isinstance(value, str):
            return value
        value = subnet_re.sub(lambda m: moves[m.group(0)], value)  # one pass: none moved twice
        if value.startswith(f"{project}-"):  # a container name (ansible_host)
            value = f"{project}-p{k}-{value.removeprefix(project + '-')}"
        # a published port (gameday_published, prometheus_listen, a prometheus_url)
        published = re.fullmatch(
            r"((?:https?://)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}):(\d{1,5})(/.*)?", value
        )
        if published:
            host, port, path = published.groups()
            value = f"{host}:{int(port) + 100 * k}{path or ''}"
        return value

    data = move(yaml.safe_load(inventory.path.read_text()))
    lab = data["all"]["vars"]["gameday_lab"]
    lab["name"] = f"{inventory.lab.name}-p{k}"
    if inventory.lab.state_dir:
        lab["state_dir"] = f"{inventory.lab.state_dir}-p{k}"
    compose = lab.setdefault("compose", {})
    compose["project"] = f"{project}-p{k}"
    base = inventory.path.parent
    compose["file"] = str((base / spec.file).resolve())
    compose["playbooks"] = str((base / spec.playbooks).resolve())
    compose["subnets"] = {
        role: move(subnet.split("/")[0].rsplit(".", 1)[0] + ".0") + "/24"
        for role, subnet in spec.subnets.items()
    }
    state = Path(lab.get("state_dir") or default_state_root() / lab["name"])
    state.mkdir(parents=True, exist_ok=True)
    path = state / "inventory.yaml"
    write_private(  # the nodes' environments are in it: owner-only
        path,
        f"# instance {k} of {inventory.path} for `gameday run --parallel` (written by gameday)\n"
        + yaml.safe_dump(data, sort_keys=False),
    )
    return load_inventory(path)


def run_workers(
    scenarios: list[LoadedScenario],
    n: int,
    work: Callable[[int, LoadedScenario], Any],
    setup: Callable[[int], None],
    teardown: Callable[[int], None],
) -> tuple[list[Any], list[BaseException]]:
    """Worker k (0..n-1) sets its lab up, takes scenarios off one queue until it is empty, and
    tears its lab down. Results come back in the scenarios' order; errors are collected."""
    todo: queue.Queue[tuple[int, LoadedScenario]] = queue.Queue()
    for i, ls in enumerate(scenarios):
        todo.put((i, ls))
    results: list[Any] = [None] * len(scenarios)
    errors: list[BaseException] = []

    abort = threading.Event()

    def worker(k: int) -> None:
        try:
            setup(k)
            while not abort.is_set():
                try:
                    i, ls = todo.get_nowait()
                except queue.Empty:
                    return
                results[i] = work(k, ls)
        except BaseException as exc:  # reported by the caller, after every worker stopped
            errors.append(exc)
        finally:
            try:
                teardown(k)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,), name=f"lab-{k}") for k in range(n)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (signals reach this thread only): every worker stops as a serial
        # run would, cleaning up its scenario; one already cleaning up is left to finish
        abort.set()
        with shielded_from_sigint():
            for t in threads:
                if t.is_alive() and t.ident is not None and t.ident not in CLEANING:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(t.ident), ctypes.py_object(KeyboardInterrupt)
                    )
            for t in threads:
                t.join()
        raise
    return results, errors
