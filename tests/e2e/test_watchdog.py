"""`gameday watchdog` on the local lab (x100), against the DeepGEMM crash write-up's faults
injected through the lab driver as a scenario's inject phase does: an exit-0 head crash it must
recover with a whole-group restart, a request-shape crash loop it must give up on, and a cold
boot it must not kill."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runner.labs.common.alertmanager_config import receiver_listen
from runner.labs.common.planning import plan_change
from runner.labs.local.driver import LocalLab
from runner.run.receiver import WebhookReceiver
from runner.spec.actions import EngineProcess, Program, SignalName, StartProcess, StopProcess
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, gameday, inventory, ok

pytestmark = pytest.mark.e2e
TP = ["node1", "node2", "node3", "node4"]
# stray-gpu-process's traffic: a prompt of a shape the engine has not served yet
STORAGE = "VLLM_LAB_STORAGE_GIB_S"
SLOW_VOLUME = [f"--set-env={STORAGE}=0.015"]  # ~16 MB/s: a throttled network volume
QUIET = re.compile(r"boot quiet for (\d+) s of ")
NEW_SHAPE = (
    "Summarise the following incident report in three bullet points, keeping every number "
    "exactly as written: the head node's container exited with code 0 after eighteen hours, the "
    "three workers stayed up, and the heartbeat monitor complained two and a half hours later."
)


H100_SERVING = {
    "gameday_gpu: {type: a10g, count: 1}\n          gameday_restart: always": (
        "gameday_gpu: {type: h100, count: 2}\n          gameday_restart: always"
    )
}


class Dog:
    """A `gameday watchdog` child process, its JSON log lines collected as they come."""

    def __init__(self, inv: Path, *args: str) -> None:
        cmd = [sys.executable, "-m", "runner.cli", "watchdog", "--lab", str(inv)]
        self.proc = subprocess.Popen(
            [*cmd, "--metrics-port", "0", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(json.loads(line))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    def decisions(self) -> list[str]:
        return [ln["decision"] for ln in self.lines if "decision" in ln]

    def wait_for(self, decision: str, timeout: float, after: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            hits = [ln for ln in self.lines[after:] if ln.get("decision") == decision]
            if hits:
                return hits[0]
            assert self.proc.poll() is None, f"watchdog exited: {''.join(self.err)}"
            time.sleep(0.05)
        raise AssertionError(f"no {decision!r} within {timeout} s: {self.lines[:12]}")

    def metrics(self) -> str:
        url = next(ln for ln in self.err if "metrics on " in ln).split("metrics on ")[1].strip()
        return httpx.get(url, timeout=5).text

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, LocalLab]]:
    tmp = tmp_path_factory.mktemp("watchdog")
    named = f"name: watchdog\n      state_dir: {tmp / 'lab-state'}"
    # the serving node: two H100s, for the 70B cold boot; a boot may take two hours real
    inv = inventory(
        tmp,
        "127.0.78.71",
        **{"name: local": named, **H100_SERVING, "boot_timeout_s: 1800": "boot_timeout_s: 7200"},
    )
    ok(gameday("lab", "up", "--lab", str(inv)))
    try:
        yield inv, LocalLab(load_inventory(inv))
    finally:
        ok(gameday("lab", "down", "--lab", str(inv), timeout=60))


def incarnations(lab: LocalLab) -> dict[str, int]:
    return {n: st.incarnation for n, st in lab.states().items() if n in TP}


def test_head_only_restart_is_recovered_by_a_group_restart(lab: tuple[Path, LocalLab]) -> None:
    inv, driver = lab
    dog = Dog(inv, "--group", "tp_group")
    try:
        dog.wait_for("serving", 30)
        before = incarnations(driver)
        n = len(dog.lines)
        driver.signal(
            "node1", EngineProcess.ENGINE_CORE, SignalName.KILL
        )  # head-only-restart's inject
        restart = dog.wait_for("restart", 30, after=n)
        served = dog.wait_for("serving", 60, after=n)
        after = incarnations(driver)
        # recovered within head-only-restart's time_to_recover (1800 s real), nobody involved
        recovered_s = served["real_s"] - dog.lines[n - 1]["real_s"]
        assert recovered_s <= 1800
        print(f"recovered {recovered_s:.0f} s real after the last good look")
        assert restart["state"] == "restarting"
        assert {n: after[n] - before[n] for n in TP} == {n: 1 for n in TP}  # all four, once
        assert dog.decisions().count("restart") == 1
        text = dog.metrics()
        assert 'gameday_watchdog_restarts_total{group="tp_group"} 1.0' in text
        assert 'gameday_watchdog_state{gameday_watchdog_state="serving",group="tp_group"} 1.0' in (
            text
        )
        assert 'gameday_watchdog_last_probe_ok{group="tp_group"} 1.0' in text
    finally:
        assert dog.stop() == 0


def test_a_request_shape_crash_loop_spends_the_budget_and_gives_up(
    lab: tuple[Path, LocalLab],
) -> None:
    """The give-up alert goes to the lab's own Alertmanager (no --alert-url), which routes it
    to the runner's webhook receiver as it routes the DeepGEMM crash write-up's rules."""
    inv, driver = lab
    receiver = WebhookReceiver(*receiver_listen(load_inventory(inv))).start()
    stray = StartProcess(
        kind="start_process", node="node1", name="omniparser", program=Program.STRAY_GPU_PROCESS
    )
    dog = Dog(inv, "--group", "tp_group", "--restart-budget", "2")
    try:
        dog.wait_for("serving", 30)  # its probe's shape served before the stray arrives
        driver.apply(plan_change(driver, stray))  # stray-gpu-process's inject, kept in place
        deadline = time.monotonic() + 30
        while not any("omniparser" in p.name for p in driver.gpu_processes("node1")):
            assert time.monotonic() < deadline, "the stray never took GPU memory"
            time.sleep(0.05)
        before = incarnations(driver)
        body = {"messages": [{"role": "user", "content": NEW_SHAPE}], "max_tokens": 16}
        with contextlib.suppress(httpx.HTTPError):  # the engine dies serving it: the fault
            httpx.post(driver.url("node1") + "/v1/chat/completions", json=body, timeout=5)
        gave_up = dog.wait_for("give_up", 90)
        print(f"gave up at {gave_up['real_s']:.0f} s real into the watch")
        assert gave_up["level"] == "error"
        assert "restart budget spent (2 restart(s) within 3600 s)" in gave_up["reason"]
        assert dog.decisions().count("restart") == 2
        after_give_up = incarnations(driver)
        assert {n: after_give_up[n] - before[n] for n in TP} == {n: 2 for n in TP}
        n = len(dog.lines)
        dog.wait_for("hold", 10, after=n)
        time.sleep(3)  # 300 s real more: no restart, only holds
        assert set(dog.decisions()[n:]) == {"hold"}
        assert incarnations(driver) == after_give_up
        assert any("the alert goes to http://" in ln for ln in dog.err), dog.err
        delivered = receiver.wait_for(lambda r: r.alertname == "GamedayWatchdogGaveUp", 30)
        assert delivered is not None, [r.alertname for r in receiver.received()]
        assert delivered.status == "firing"
        assert delivered.labels == {
            "alertname": "GamedayWatchdogGaveUp",
            "severity": "critical",
            "lab": "watchdog",
            "group": "tp_group",
        }
        assert delivered.annotations["procedure"].endswith(
            f"restart all 4 nodes together: gameday lab restart tp_group --lab {inv}"
        )
        text = dog.metrics()
        assert 'gameday_watchdog_restarts_total{group="tp_group"} 2.0' in text
        assert 'gameday_watchdog_state{gameday_watchdog_state="gave_up",group="tp_group"} 1.0' in (
            text
        )
        assert 'gameday_watchdog_decisions_total{decision="give_up",group="tp_group"} 1.0' in text
    finally:
        assert dog.stop() == 0
        receiver.stop()
        stop = StopProcess(kind="stop_process", node="node1", name="omniparser")
        driver.apply(plan_change(driver, stop))
        driver.restart(TP)


def test_a_cold_boot_longer_than_a_fixed_grace_is_not_killed(lab: tuple[Path, LocalLab]) -> None:
    """Llama-3.1-70B (131 GiB in bf16) on two H100s, its 65.7 GiB per rank read from a volume at
    0.015 GiB/s: a cold boot of over an hour real (the fetch, then 29 shards of about 150 s
    each). A watchdog with the DeepGEMM crash write-up's fixed boot grace of 15 minutes kills it;
    this one, with the same figure as its stall window, waits while the boot moves."""
    inv, driver = lab
    # the DeepGEMM crash write-up, section 8: "부팅 유예 15분" (a boot grace of 15 minutes)
    grace = 900.0
    dog = Dog(inv, "--group", "serving", "--boot-stall-s", str(grace))
    try:
        dog.wait_for("serving", 30)
        n = len(dog.lines)
        big = ["model_tag=meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size=2"]
        big.append("--gpu-memory-utilization=0.95")
        edits = [f"--set-arg={arg}" for arg in big]
        ok(gameday("lab", "config", "serving", "--lab", str(inv), *edits, *SLOW_VOLUME))
        boot = dog.wait_for("wait", 30, after=n)
        assert boot["reason"] == "serving started anew (not by the watchdog): booting"
        served = dog.wait_for("serving", 150, after=n)
        booted_s = served["real_s"] - boot["real_s"]
        print(f"cold boot: {booted_s:.0f} s real; a fixed grace of {grace:.0f} s kills it")
        assert booted_s > 3600
        assert booted_s > grace  # a watchdog with a fixed grace this long would have killed it
        assert "restart" not in dog.decisions()
        # the old incarnation stopping may fail a look before the new one shows; from then on
        # the boot is only waited for
        during = dog.lines[dog.lines.index(boot) : dog.lines.index(served)]
        assert {ln["decision"] for ln in during} == {"wait"}
        quiet = [float(m[1]) for ln in during if (m := QUIET.match(ln["reason"]))]
        print(f"{len(during)} looks, the longest quiet spell {max(quiet, default=0):.0f} s real")
        assert max(quiet, default=0) < grace
        text = "\n".join(ln.text for ln in driver.logs_since("serving", None))
        took = re.findall(r"Loading weights took ([\d.]+) seconds", text)
        assert took[-1] == "4380.55"  # 65.71 GiB / 0.015 GiB/s
        assert (
            "Loading safetensors checkpoint shards: 100% Completed | 29/29 [1:13:00<00:00," in text
        )
    finally:
        assert dog.stop() == 0
        qwen = ["model_tag=Qwen/Qwen2.5-14B-Instruct-AWQ", "--gpu-memory-utilization=0.9"]
        back = [f"--set-arg={arg}" for arg in qwen]
        back += ["--unset-arg=--tensor-parallel-size", f"--unset-env={STORAGE}"]
        ok(gameday("lab", "config", "serving", "--lab", str(inv), *back))
