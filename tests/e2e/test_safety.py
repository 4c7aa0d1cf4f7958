"""Never leave a lab broken: SIGKILL at random moments of a run (each after the run reached a
given phase) then `gameday cleanup`; scenario values never reach a shell."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.labs.local.driver import LocalLab
from runner.run import journal
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, gameday, ok

pytestmark = pytest.mark.e2e
META = "$(touch {m}1); `touch {m}2`; touch {m}3 | touch {m}4 && touch {m}5 > {m}6 '\"\\"


def at_baseline(lab: LocalLab) -> list[str]:
    """Everything that differs from the lab's baseline (empty when clean)."""
    return lab.leftovers() + [
        f"open journal entry {c.seq}" for c in journal.open_changes(lab.state_dir)
    ]


@pytest.fixture
def lab() -> LocalLab:
    driver = LocalLab(load_inventory(ROOT / "inventories" / "local.yaml"))
    assert gameday("lab", "up").returncode == 0
    yield driver
    ok(gameday("lab", "down"))


# moments to kill a run at: each a progress line the run must reach, then a random delay
MOMENTS = ("] inject", "] expect: waiting for the failure", "] recover 1/")


def run_until(scenario: str, marker: str, reports: Path) -> subprocess.Popen[str]:
    """`gameday run` of the scenario, returned once its progress shows `marker`; a failure
    (with what it printed) when it ends before."""
    argv = ["run", f"scenarios/{scenario}.yaml", "--reports", str(reports)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            return proc
    proc.wait()
    raise AssertionError(
        f"the run ended (exit {proc.returncode}) before {marker!r}:\n" + "".join(seen)
    )


@pytest.mark.parametrize(
    "scenario", ["stray-gpu-process", "dhcp-address-change", "service-name-collision"]
)
def test_sigkill_at_random_moments_then_cleanup(
    lab: LocalLab, scenario: str, tmp_path: Path
) -> None:
    rnd = random.Random(scenario)
    for marker in MOMENTS:
        proc = run_until(scenario, marker, tmp_path)
        delay = rnd.uniform(0.0, 0.3)
        time.sleep(delay)
        assert proc.poll() is None, f"the run ended before the kill {delay:.2f} s after {marker!r}"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
        p = gameday("cleanup")
        assert p.returncode == 0, p.stderr
        assert at_baseline(lab) == [], f"after a kill {delay:.2f} s after {marker!r}"
        assert gameday("cleanup").returncode == 0  # idempotent
        assert at_baseline(lab) == []


def yaml_quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def test_shell_metacharacters_never_reach_a_shell(lab: LocalLab, tmp_path: Path) -> None:
    """Every string a scenario passes to the lab (a prompt, an env value, an engine flag value)
    carries shell metacharacters; none of them may run."""
    mark = str(tmp_path / "pwned")
    meta = yaml_quoted(META.format(m=mark))
    text = (
        (ROOT / "scenarios" / "tp-mismatch.yaml").read_text().replace("id: tp-mismatch", "id: meta")
    )
    for old, new in [
        ('prompt: "Introduce yourself in one sentence."', f"prompt: {meta}"),
        (
            "args: {--tensor-parallel-size: 2}",
            f"args: {{--tensor-parallel-size: 2, --served-model-name: {meta}}}",
        ),
        (
            "  - kind: set_args\n    node: serving\n    args: {--tensor",
            f"  - kind: set_env\n    node: serving\n    env: {{META_VALUE: {meta}}}\n"
            "  - kind: set_args\n    node: serving\n    args: {--tensor",
        ),
    ]:
        assert old in text, old
        text = text.replace(old, new, 1)
    f = tmp_path / "meta.yaml"
    f.write_text(text)
    assert gameday("validate", str(f)).returncode == 0
    p = gameday("run", str(f), "--reports", str(tmp_path / "r"))
    assert p.returncode == 0, p.stderr  # the values reached the lab: the scenario ran through
    (result,) = [p for p in (tmp_path / "r").glob("*/result.json") if not p.parent.is_symlink()]
    (sc,) = json.loads(result.read_text())["scenarios"]
    assert sc["verdict"] == "passed"
    phases = [e["event"] for e in sc["timeline"] if e["event"].startswith("phase ")]
    assert phases[:4] == ["phase baseline", "phase inject", "phase expect", "phase recover"]
    assert phases[-1] == "phase cleanup"
    assert sorted(tmp_path.glob("pwned*")) == []
    assert sorted(ROOT.glob("pwned*")) == []
    assert at_baseline(lab) == []
