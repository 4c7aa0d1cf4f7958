"""bench/engine_stamp.py: the engine's exit, stamped from outside the engine."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

from engine_stamp import STAMP_VAR, main  # noqa: E402


def test_each_exit_appends_time_and_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stamp = tmp_path / "exit"
    monkeypatch.setenv(STAMP_VAR, str(stamp))
    monkeypatch.delenv("GAMEDAY_GPU_STATE", raising=False)
    before = time.time()
    assert main(["smi"]) == 2  # no shared GPU: `vllm-lab smi` exits 2 at once
    assert main(["smi"]) == 2
    after = time.time()
    lines = [ln.split() for ln in stamp.read_text().splitlines()]
    assert [code for _, code in lines] == ["2", "2"]
    assert all(before <= float(t) <= after for t, _ in lines)
    assert capsys.readouterr().err.count("GAMEDAY_GPU_STATE is not set") == 2


def test_no_stamp_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STAMP_VAR, raising=False)
    monkeypatch.delenv("GAMEDAY_GPU_STATE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["smi"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_the_engine_has_no_stamp_hook() -> None:
    sources = [p.read_text() for p in (ROOT / "labengine").rglob("*.py")]
    assert [s for s in sources if "STAMP" in s] == []
