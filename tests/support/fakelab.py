"""The fake lab (runner.labs.fake) on a small inventory, and scenarios written as dicts: each is
loaded through the real loaders, so a test's scenario is one a user could write."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from runner.labs.base import Capability
from runner.labs.fake import FakeLab, Script, serves
from runner.results.schema import ScenarioResult
from runner.run import run_scenario
from runner.run.journal import Journal, open_changes
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory
from runner.spec.scenario import LoadedScenario, load_scenario

SCALE = 1000  # the fake lab runs 1000x faster than real time: 0.1 lab s is 100 s real

INVENTORY: dict[str, Any] = {
    "all": {
        "vars": {
            "gameday_lab": {
                "name": "fake",
                "kind": "local",
                "time_scale": SCALE,
                "timing_allowance_s": 0.002,
                "boot_timeout_s": 60,
                "monitoring": {"prometheus_listen": "127.0.79.1:9090", "scrape_interval_s": 15},
            }
        },
        "children": {
            "serving": {
                "hosts": {
                    "serving": {
                        "gameday_role": "serving",
                        "gameday_address": "127.0.77.10",
                        "gameday_restart": "always",
                        "gameday_engine_args": ["Qwen/Qwen2.5-0.5B-Instruct", "--port", "{port}"],
                    }
                }
            },
            "tp_group": {
                "vars": {"gameday_restart": "on-failure"},
                "children": {
                    "head": {
                        "hosts": {
                            "node1": {
                                "gameday_role": "head",
                                "gameday_address": "127.0.80.11",
                                "gameday_management_address": "127.0.80.11",
                                "gameday_engine_args": ["m", "--port", "{port}"],
                            }
                        }
                    },
                    "workers": {
                        "hosts": {
                            "node2": {
                                "gameday_role": "worker",
                                "gameday_address": "127.0.80.12",
                                "gameday_management_address": "127.0.80.12",
                                "gameday_engine_args": ["m", "--headless"],
                            }
                        }
                    },
                },
            },
        },
    }
}

HEALTH = {"kind": "http", "path": "/health"}
INFERENCE = {"kind": "inference", "prompt": "Say OK.", "max_tokens": 4}


def scenario_doc(**fields: Any) -> dict[str, Any]:
    """A start-up failure scenario on `serving` (a wrong flag makes it exit 1 with two known
    lines, within 100-300 s real); `fields` replace its parts."""
    doc: dict[str, Any] = {
        "apiVersion": "gameday/v1",
        "kind": "Scenario",
        "metadata": {"id": "fake-startup", "title": "A wrong flag stops the start-up"},
        "labs": ["local"],
        "target": "serving",
        "baseline": {"probes": [HEALTH, INFERENCE]},
        "inject": [{"kind": "set_args", "node": "serving", "args": {"--max-model-len": 99999}}],
        "expect": {
            "signature": {
                "source": "previous",
                "in_order": [
                    {"regex": "Loading weights"},
                    {
                        "regex": "max_model_len \\((?P<n>\\d+)\\) is too large",
                        "captures": {"n": {"eq": 99999}},
                    },
                ],
            },
            "exit_code": 1,
            "time_to_fail": {"min_s": 100, "max_s": 300},
        },
        "recover": [
            {
                "name": "Restart and hope",
                "outcome": "does_not_restore",
                "why": "the flag is still wrong",
                "actions": [{"kind": "restart", "nodes": ["serving"]}],
            },
            {"name": "Roll back", "outcome": "restores", "actions": [{"kind": "rollback"}]},
        ],
        "verify": {"probes": [HEALTH, INFERENCE], "time_to_recover": {"max_s": 600}},
    }
    doc.update(fields)
    return doc


WRONG_FLAG_LOGS = (
    "INFO Loading weights took 1.2 seconds",
    "ValueError: max_model_len (99999) is too large",
)


def wrong_flag(exit_after_s: float = 0.2, code: int = 1, restarts: int = 0) -> Script:
    """`serving` exits while its args carry --max-model-len 99999; it serves otherwise."""
    from runner.labs.fake import Exits

    def script(node: str, config: Any) -> Any:
        if "99999" in config.args:
            return Exits(code=code, logs=WRONG_FLAG_LOGS, after_s=exit_after_s, restarts=restarts)
        return serves(node, config)

    return script


@dataclass
class FakeRun:
    lab: FakeLab
    ls: LoadedScenario
    journal_dir: Path
    progress: list[str] = field(default_factory=list)  # what the run said, in order

    def run(self) -> ScenarioResult:
        journal = Journal(self.lab.state_dir, "run-1")
        http = httpx.Client(transport=self.lab.transport)
        return run_scenario(self.ls, self.lab, journal, self.progress.append, http=http)

    def open_changes(self) -> int:
        return len(open_changes(self.lab.state_dir))


def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(INVENTORY))
    return load_inventory(path)


def fake_run(
    tmp_path: Path,
    doc: dict[str, Any],
    script: Script = serves,
    capabilities: frozenset[Capability] = frozenset(Capability),
    **lab_kw: Any,
) -> FakeRun:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    lab = FakeLab(
        inventory(tmp_path),
        script,
        capabilities=capabilities,
        state_dir=tmp_path / "state",
        **lab_kw,
    )
    lab.up()
    return FakeRun(lab, load_scenario(path), tmp_path / "state")
