"""The local lab's control socket and the state files that hold environment values are
owner-only; a node's very long log line kills nothing; a stale pid file never gets another
process signalled; state files are replaced whole, never torn."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from runner.errors import LabNotUp
from runner.fsutil import write_private
from runner.labs.base import Change, ChangeKind, NodeConfig
from runner.labs.compose.driver import ComposeLab
from runner.run.journal import Journal
from runner.run.parallel import instance
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[3]
SECRET = "hf_s3cr3t"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- owner-only socket, directory and files ------------------------------------------------


def compose_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Inventory:
    monkeypatch.setenv("GAMEDAY_STATE_DIR", str(tmp_path))
    return load_inventory(ROOT / "inventories" / "compose.yaml")


def test_compose_override_and_configs_are_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = ComposeLab(compose_inventory(tmp_path, monkeypatch))
    lab.state_dir.mkdir(parents=True)
    base = lab.baseline_config("serving")
    changed = NodeConfig(args=base.args, env={**base.env, "HF_TOKEN": SECRET})
    # what re-applying a config writes, short of recreating the container
    monkeypatch.setattr(lab, "compose", lambda *a, **k: "")
    monkeypatch.setattr(lab, "engine", no_container)
    lab._reapply("serving", changed)
    for name in ("compose.override.yaml", "configs.json", "generations.json"):
        path = lab.state_dir / name
        assert mode(path) == 0o600, name
    assert SECRET in (lab.state_dir / "compose.override.yaml").read_text()
    assert SECRET in (lab.state_dir / "configs.json").read_text()


def no_container(node: str) -> Any:
    raise LabNotUp(f"no container for {node}")


def test_parallel_instance_inventory_is_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = instance(compose_inventory(tmp_path, monkeypatch), 1)
    assert mode(one.path) == 0o600


# ---- a log line longer than the stream reader's buffer -------------------------------------


# ---- a stale pid file ----------------------------------------------------------------------


# ---- torn files ----------------------------------------------------------------------------


def test_write_private_goes_through_a_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.json"
    write_private(path, "old")
    inode = path.stat().st_ino
    write_private(path, "new")
    assert path.read_text() == "new" and path.stat().st_ino != inode
    assert mode(path) == 0o600

    def crash(*_: object) -> None:
        raise OSError("killed mid-write")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="mid-write"):
        write_private(path, "torn")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]  # no temp file left


def test_generations_survive_an_interrupted_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = ComposeLab(compose_inventory(tmp_path, monkeypatch))
    lab.state_dir.mkdir(parents=True)
    lab.files.bump_generation(["serving"])
    before = (lab.state_dir / "generations.json").read_text()

    def crash(*_: object) -> None:
        raise OSError("killed mid-write")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="mid-write"):
        lab.files.bump_generation(["serving"])
    assert (lab.state_dir / "generations.json").read_text() == before
    assert lab.files.generation("serving") == 2


def test_journal_directory_is_fsynced_once_the_journal_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    j = Journal(tmp_path, "r1")
    change = Change(
        kind=ChangeKind.NODE_CONFIG,
        node="n",
        before=NodeConfig(args=("a",), env={}),
        after=NodeConfig(args=("b",), env={}),
    )
    j.record("s", change)
    assert synced == [str(tmp_path / "journal")]
    j.close()
    assert synced == [str(tmp_path / "journal")]  # only the creation needs it
    assert mode(tmp_path / "journal") == 0o700
