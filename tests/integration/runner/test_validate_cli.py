"""`gameday validate` as a user runs it: a typo is exit 2 with file:line and a suggestion."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import ROOT, gameday


def test_typos_and_duplicate_ids_are_exit_2_with_suggestions(tmp_path: Path) -> None:
    kv = (ROOT / "scenarios" / "kv-cache-shortage.yaml").read_text()
    (tmp_path / "flag.yaml").write_text(
        kv.replace("--gpu-memory-utilization:", "--gpu-memory-utilisation:").replace(
            "id: kv-cache-shortage", "id: flag-typo"
        )
    )
    (tmp_path / "target.yaml").write_text(
        kv.replace("target: serving", "target: servr").replace("id: kv-cache-shortage", "id: typo")
    )
    (tmp_path / "copy.yaml").write_text(kv)
    (tmp_path / "again.yaml").write_text(kv)
    p = gameday("validate", "--lab", "inventories/local.yaml", str(tmp_path))
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"{tmp_path / 'flag.yaml'}:22 [inject.0.args.--gpu-memory-utilisation]" in p.stderr
    assert "did you mean '--gpu-memory-utilization'?" in p.stderr
    assert f"{tmp_path / 'target.yaml'}:13 [target]: 'servr' is not a host" in p.stderr
    assert "did you mean 'serving'?" in p.stderr
    assert "scenario id 'kv-cache-shortage' is also the id of" in p.stderr


def test_the_shipped_files_validate_against_every_lab() -> None:
    for inv in ("local", "compose", "kube-testserver"):
        p = gameday("validate", "--lab", f"inventories/{inv}.yaml", "scenarios", "inventories")
        assert p.returncode == 0, p.stdout + p.stderr
