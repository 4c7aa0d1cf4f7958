"""`gameday run --parallel N`: the scenarios spread over N isolated instances of one lab, each
worker taking the next scenario when it is free, with one merged report. How a lab is moved out
of the way of its other instances is the lab's own knowledge: each lab kind that runs several
instances has `check_instances` and `instance` beside its driver.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from typing import Any

from runner.errors import InputError
from runner.labs.registry import entry
from runner.run import CLEANING, shielded_from_sigint
from runner.spec.inventory import Inventory
from runner.spec.scenario import LoadedScenario

MAX_PARALLEL = 64


def check_parallel(inventory: Inventory, n: int) -> None:
    if not 1 <= n <= MAX_PARALLEL:
        raise InputError(f"--parallel must be 1..{MAX_PARALLEL}, not {n}", field="--parallel")
    if n == 1:
        return
    entry(inventory.lab.kind).check_instances(inventory, n)


def instance(inventory: Inventory, k: int) -> Inventory:
    """Instance k of the inventory's lab (k = 0 is the inventory itself)."""
    if k == 0:
        return inventory
    return entry(inventory.lab.kind).instance(inventory, k)


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
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM (signals reach this thread only): every worker stops as a serial
        # run would, cleaning up its scenario (the same interrupt, so its report names the
        # signal); one already cleaning up is left to finish
        abort.set()
        with shielded_from_sigint():
            for t in threads:
                if t.is_alive() and t.ident is not None and t.ident not in CLEANING:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(t.ident), ctypes.py_object(type(exc))
                    )
            for t in threads:
                t.join()
        raise
    return results, errors
