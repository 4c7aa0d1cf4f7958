"""`lab up --readopt` and `cleanup --expired` belong to adopted deployments: on a lab gameday
makes, each says so and touches nothing; `--readopt` waits for a killed run's cleanup."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from runner.cli.main import main
from runner.labs.base import Change, ChangeKind, NodeConfig
from runner.run.journal import Journal
from tests.support.cli import ROOT

LOCAL = ROOT / "inventories" / "local.yaml"


def test_cleanup_expired_is_for_an_adopted_deployment(tmp_path: Path) -> None:
    got = CliRunner().invoke(
        main,
        ["cleanup", "--expired", "--lab", str(LOCAL)],
        env={"GAMEDAY_STATE_DIR": str(tmp_path)},
    )
    assert got.exit_code == 2, got.output
    assert "lab 'local' adopts no deployment: only an adopted one holds a fault lease" in got.stderr


def test_readopt_on_a_lab_gameday_makes_is_refused(tmp_path: Path) -> None:
    got = CliRunner().invoke(
        main,
        ["lab", "up", "--readopt", "--lab", str(LOCAL)],
        env={"GAMEDAY_STATE_DIR": str(tmp_path)},
    )
    assert got.exit_code == 3, got.output
    assert "the local lab adopts no deployment: there is nothing to re-adopt" in got.stderr
    assert not (tmp_path / "local" / "lab.json").exists()  # nothing was started


def test_readopt_waits_for_the_cleanup_of_a_killed_run(tmp_path: Path) -> None:
    inv = tmp_path / "prod.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "gameday_lab": {
                            "name": "team-stack",
                            "kind": "compose",
                            "adopt": {"project": "my-stack"},
                        }
                    },
                    "hosts": {"serving": {"gameday_published": "127.0.0.1:28000"}},
                }
            }
        )
    )
    cfg = NodeConfig(args=("m",), env={})
    Journal(tmp_path / "state" / "team-stack", "killed").record(
        "kv-cache-shortage",
        Change(kind=ChangeKind.NODE_CONFIG, node="serving", before=cfg, after=cfg),
    )
    got = CliRunner().invoke(
        main,
        ["lab", "up", "--readopt", "--lab", str(inv)],
        env={"GAMEDAY_STATE_DIR": str(tmp_path / "state")},
    )
    assert got.exit_code == 3, got.output
    assert "re-adopting now would take them for the team's" in got.stderr
    assert f"hint: gameday cleanup --lab {inv}, then lab up --readopt" in got.stderr
