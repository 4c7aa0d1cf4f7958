"""The local lab's supervisor counts each of its own processes' exits (Prometheus, Alertmanager,
an exporter: those it keeps running), so that the lab's `dead_part` names one that died even once
the supervisor has started it again; a process the lab stops is not counted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runner.labs.local.supervisor import Aux


def _aux(tmp_path: Path, script: str) -> Aux:
    return Aux(
        name="prometheus",
        command=["sh", "-c", script],
        env={"PATH": "/usr/bin:/bin"},
        log=tmp_path / "prometheus.log",
        restart=True,
    )


def test_the_supervisor_counts_a_lab_process_exiting_on_its_own(tmp_path: Path) -> None:
    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        dying = _aux(tmp_path, "echo 'err: lock DB directory'; exit 1")
        steady = Aux("alertmanager", ["sleep", "30"], {}, tmp_path / "am.log", restart=True)
        dying.start()
        steady.start()
        for _ in range(200):
            if dying.exits >= 2:
                break
            await asyncio.sleep(0.02)
        await steady.stop()  # stopped by the lab: not a death
        await dying.stop()
        return dying.snapshot(), steady.snapshot()

    dying, steady = asyncio.run(go())
    assert dying["exits"] >= 2 and dying["last_exit_code"] == 1 and dying["restart"]
    assert (steady["exits"], steady["last_exit_code"]) == (0, None)
    assert dying["log"] == str(tmp_path / "prometheus.log")


def test_the_supervisor_counts_a_lab_program_that_cannot_start(tmp_path: Path) -> None:
    aux = Aux("prometheus", [str(tmp_path / "nothing")], {}, tmp_path / "p.log", restart=True)
    asyncio.run(aux.run())
    assert (aux.exits, aux.last_exit_code) == (1, 127)
    assert "exec " in (tmp_path / "p.log").read_text()
