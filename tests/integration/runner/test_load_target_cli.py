"""A load aimed anywhere but the lab's own nodes, as a user meets it: exit 2, file:line, field."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import ROOT, gameday


def test_a_load_aimed_off_the_lab_is_refused_at_load(tmp_path: Path) -> None:
    text = (ROOT / "scenarios" / "head-only-restart.yaml").read_text()
    head, load = text.split("\nload:", 1)
    f = tmp_path / "off-lab.yaml"
    f.write_text(head + "\nload:\n  node: 'http://203.0.113.9:8000'" + load)
    line = len(head.splitlines()) + 2
    for argv in (["validate", str(f)], ["run", str(f), "--lab", "inventories/local.yaml"]):
        p = gameday(*argv)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"{f}:{line} [load.node]: " in p.stderr
        assert "load goes to the lab's own nodes only" in p.stderr
