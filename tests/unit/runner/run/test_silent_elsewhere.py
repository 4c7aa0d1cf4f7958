"""A silent failure whose cause another node logs (a decode engine behind a proxy), and a
shortcut that restarts another node than the target: judged once that node serves again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from runner.labs.fake import Hangs, NodeConfig, Outcome, Serves
from runner.results.schema import Verdict
from tests.support.fakelab import HEALTH, fake_run, scenario_doc

NODE1_INFERENCE = {"kind": "inference", "node": "node1", "prompt": "Say OK.", "max_tokens": 4}
LINE = "NIXL transfer failure: handshake_failed"


def _doc(settle_s: float) -> dict[str, Any]:
    return scenario_doc(
        inject=[{"kind": "restart", "nodes": ["node1"]}],
        expect={
            "failure": "silent",
            "probes": [HEALTH],
            "elsewhere": [
                {
                    "node": "node1",
                    "view": "the decode engine's",
                    "in_order": [{"regex": LINE, "identifies": True}],
                    # 6 wall seconds at the fake lab's x1000: node1's restart, on a busy machine
                    "within_s": 6000,
                }
            ],
            "time_to_fail": {"max_s": 600},
        },
        recover=[
            {
                "name": "Restart node1 (it never serves again)",
                "outcome": "does_not_restore",
                "settle_s": settle_s,
                "actions": [{"kind": "restart", "nodes": ["node1"]}],
            },
            {
                "name": "Restart node1 again",
                "outcome": "restores",
                "actions": [{"kind": "restart", "nodes": ["node1"]}],
            },
        ],
        verify={"probes": [HEALTH, NODE1_INFERENCE], "time_to_recover": {"max_s": 600}},
    )


def _script() -> Any:
    """node1's second run logs the line; its third (the shortcut's restart) hangs."""
    runs: dict[str, int] = {}

    def script(node: str, _config: NodeConfig) -> Outcome:
        runs[node] = runs.get(node, 0) + 1
        if node == "node1" and runs[node] == 2:
            return Serves(logs=(LINE,))
        if node == "node1" and runs[node] == 3:
            return Hangs()
        return Serves()

    return script


def test_a_silent_failure_checks_the_lines_another_node_logs(tmp_path: Path) -> None:
    result = fake_run(tmp_path, _doc(settle_s=100), _script()).run()
    got = {a.name: a.verdict for a in result.assertions}
    name = f"expect on node1: signature 1/1: {LINE}"
    assert got[name] is Verdict.PASSED, got
    assert result.verdict is Verdict.PASSED, [
        (a.name, a.observed) for a in result.assertions if a.verdict is not Verdict.PASSED
    ]


def test_a_shortcut_waits_for_the_other_node_it_restarts(tmp_path: Path) -> None:
    """The target serves throughout: the shortcut has played out only once node1 serves again,
    or its settle time (2000 s real, 2 s at the fake lab's x1000) has passed."""
    run = fake_run(tmp_path, _doc(settle_s=2000), _script())
    began = time.monotonic()
    result = run.run()
    assert time.monotonic() - began >= 2.0
    step = next(a for a in result.assertions if a.name.startswith("recover 1:"))
    assert step.verdict is Verdict.PASSED
