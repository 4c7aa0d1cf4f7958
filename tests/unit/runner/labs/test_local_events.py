"""The local lab's events as its supervisor sends them over the control socket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.errors import LabError
from runner.labs.base import EventType
from runner.labs.local.driver import LocalLab
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[4]


def lab_answering(monkeypatch: pytest.MonkeyPatch, events: list[dict[str, Any]]) -> LocalLab:
    lab = LocalLab(load_inventory(ROOT / "inventories" / "local.yaml"))
    monkeypatch.setattr(lab, "_call", lambda *_a, **_k: events)
    return lab


def test_events_are_read_with_their_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    lab = lab_answering(
        monkeypatch,
        [
            {
                "seq": 7,
                "ts": "2026-11-30T12:00:00+00:00",
                "node": "serving",
                "type": "backoff",
                "delay_s": 0.1,
                "restarts": 1,
            },
        ],
    )
    [e] = lab.wait_events(6, 0)
    assert (e.seq, e.type, e.delay_s, e.restarts, e.exit) == (7, EventType.BACKOFF, 0.1, 1, None)


def test_a_supervisor_of_another_version_is_one_lab_error(monkeypatch: pytest.MonkeyPatch) -> None:
    old = {"seq": 1, "ts": "2026-11-30T12:00:00+00:00", "node": "serving", "type": "exited",
           "data": {"code": 1}}  # fmt: skip
    lab = lab_answering(monkeypatch, [old])
    with pytest.raises(LabError) as err:
        lab.wait_events(0, 0)
    assert err.value.message == (
        "lab 'local': its supervisor sends events this version of gameday does not read "
        "(Extra inputs are not permitted)"
    )
    assert err.value.hint == (
        f"a lab brought up by another version: gameday lab down --lab {lab.inventory.path}, "
        "then up again"
    )
