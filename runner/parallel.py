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
from typing import Any

from runner.errors import InputError
from runner.inventory import Inventory
from runner.run import CLEANING, shielded_from_sigint
from runner.scenario import LabKind, LoadedScenario

MAX_PARALLEL = 64
_IPV4 = re.compile(r"\b127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")


def check_parallel(inventory: Inventory, n: int) -> None:
    if not 1 <= n <= MAX_PARALLEL:
        raise InputError(f"--parallel must be 1..{MAX_PARALLEL}, not {n}", field="--parallel")
    if n == 1:
        return
    if inventory.lab.kind is not LabKind.LOCAL:
        raise InputError(
            f"--parallel runs isolated instances of the local lab; lab {inventory.lab.name!r} "
            f"is a {inventory.lab.kind.value} lab, which runs one instance in this version",
            file=inventory.path,
            field="--parallel",
            hint="drop --parallel, or use inventories/local.yaml",
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
    """Instance k of a local lab (k = 0 is the inventory itself)."""
    if k == 0:
        return inventory
    data = inventory.model_dump()
    moved = _move({"lab": data["lab"], "nodes": data["nodes"]}, k)
    moved["lab"]["name"] = f"{inventory.lab.name}-p{k}"
    return Inventory.model_validate({"path": inventory.path, **moved})


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
