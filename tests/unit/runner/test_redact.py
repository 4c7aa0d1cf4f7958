from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from runner.redact import MASK, redact, redact_env
from runner.report import write_reports
from runner.results import LabInfo, RunResult, ScenarioResult, TimelineEvent, Verdict

SECRET = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def test_redact_text() -> None:
    assert SECRET not in redact(f"env set HF_TOKEN={SECRET}, FOO=bar")
    assert "FOO=bar" in redact(f"env set HF_TOKEN={SECRET}, FOO=bar")
    assert (
        redact("vllm serve m --api-key s3cr3t-value --port 8000")
        == f"vllm serve m --api-key {MASK} --port 8000"
    )
    assert "s3cr3t" not in redact("non-default args: {'model': 'm', 'api_key': 's3cr3t'}")
    assert "abcdefgh12345" not in redact("Authorization: Bearer abcdefgh12345")
    assert SECRET not in redact(f"token is {SECRET} here")
    assert "zzz" not in redact("client-key-data: zzzzzzzz")
    assert redact("Loading weights took 71.20 seconds") == "Loading weights took 71.20 seconds"


def test_redact_env() -> None:
    assert redact_env({"HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "HF_HOME": "/h"}) == {
        "HF_TOKEN": MASK,
        "AWS_SECRET_ACCESS_KEY": MASK,
        "HF_HOME": "/h",
    }


def test_reports_never_carry_secrets(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    sc = ScenarioResult(
        id="s",
        title="t",
        file="f",
        lab="l",
        verdict=Verdict.PASSED,
        time_to_fail_s=1.0,
        time_to_recover_s=1.0,
        started_at=now,
        finished_at=now,
        assertions=[],
        timeline=[
            TimelineEvent(
                ts=now,
                source="runner",
                clock="c",
                event=f"inject: serving: env set HF_TOKEN={SECRET}",
            )
        ],
        evidence=[],
        notes=[f"--api-key {SECRET}"],
    )
    r = RunResult(
        run_id="r",
        gameday_version="0",
        started_at=now,
        finished_at=now,
        lab=LabInfo(name="l", kind="local", inventory="i", time_scale=1, timing_allowance_s=0),
        verdict=Verdict.PASSED,
        scenarios=[sc],
    )
    write_reports(r, tmp_path)
    for f in tmp_path.iterdir():
        assert SECRET not in f.read_text(), f.name
