"""The control plane's retry of a component whose port was taken: only where it exited on it,
and nothing left running after stop()."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kubereal import cluster


def test_a_component_is_spawned_again_only_where_it_exited_on_a_taken_port(tmp_path: Path) -> None:
    """The first attempt exits on a taken port and is spawned again; the second stays up but
    never answers: it is not spawned a third time, and stop() leaves nothing running."""
    marker = tmp_path / "tried"
    fake = tmp_path / "component"
    fake.write_text(
        "#!/usr/bin/python3\n"
        "import pathlib, sys, time\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        "if not m.exists():\n"
        "    m.write_text('1')\n"
        "    print('failed to listen on 127.0.0.1:1: bind: address already in use', flush=True)\n"
        "    sys.exit(1)\n"
        "time.sleep(120)\n"
    )
    fake.chmod(0o755)
    cp = cluster.ControlPlane(binaries=None, dir=tmp_path / "cp", ready_timeout=3.0)  # type: ignore[arg-type]
    cp.dir.mkdir()
    port = cp._spawn_on_port("kube-scheduler", [str(fake)])
    with pytest.raises(cluster.ControlPlaneError, match="not ready"):
        cp._wait_healthz("kube-scheduler", [str(fake)], port)
    assert [p.name for p in cp.procs] == ["kube-scheduler"]
    alive = cp.procs[0].popen
    assert alive.poll() is None
    cp.stop(grace=2)
    assert alive.poll() is not None
    assert (cp.dir / "kube-scheduler.log").read_text().count("address already in use") == 1
    assert (cp.dir / "kube-scheduler.1.log").exists()
