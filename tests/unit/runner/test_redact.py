from __future__ import annotations

from pathlib import Path

import pytest

from runner.report import write_reports
from runner.results.redact import MASK, redact, redact_env, redact_obj, secret_name
from runner.results.schema import TimelineEvent, Verdict
from tests.support.results import NOW, run_result, scenario_result

SECRET = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # NAME=value: the value to the next space or closing bracket, a trailing comma kept out
        (f"env set HF_TOKEN={SECRET}, FOO=bar", f"env set HF_TOKEN={MASK}, FOO=bar"),
        ("A_SECRET=x,y;z rest", f"A_SECRET={MASK} rest"),
        ("DB_PASS: hunter2", f"DB_PASS: {MASK}"),
        ("client-key-data: zzzzzzzz", f"client-key-data: {MASK}"),
        ("key=abc", f"key={MASK}"),
        # quoted values keep their quotes; an unclosed quote runs to the end of the line
        ('HF_TOKEN="abc def" next', f'HF_TOKEN="{MASK}" next'),
        ("HF_TOKEN='abc def' next", f"HF_TOKEN='{MASK}' next"),
        ('HF_TOKEN="abc def', f'HF_TOKEN="{MASK}'),
        ('HF_TOKEN="', f'HF_TOKEN="{MASK}'),
        ('HF_TOKEN="" x', f'HF_TOKEN="{MASK}" x'),
        ("HF_TOKEN=abc", "HF_TOKEN=<redacted>"),  # the mask itself
        ('{"api_key": "abc", "model": "m"}', f'{{"api_key": "{MASK}", "model": "m"}}'),
        (
            "non-default args: {'model': 'm', 'api_key': 's3cr3t'}",
            f"non-default args: {{'model': 'm', 'api_key': '{MASK}'}}",
        ),
        # --flag value on a command line
        (
            "vllm serve m --api-key s3cr3t-value --port 8000",
            f"vllm serve m --api-key {MASK} --port 8000",
        ),
        ("run --db-pass 'a b' -x", f"run --db-pass '{MASK}' -x"),
        ("--api-key=s3cr3t --port 8000", f"--api-key={MASK} --port 8000"),
        # headers keep their scheme
        ("Authorization: Bearer abcdefgh12345", f"Authorization: Bearer {MASK}"),
        ("authorization: Basic dXNlcjpwYXNz", f"authorization: Basic {MASK}"),
        # token shapes anywhere
        (f"token is {SECRET} here", f"token is {MASK} here"),
        ("using sk-abcdefghijklmnopqrstuvwxyz now", f"using {MASK} now"),
        ("sent bearer abcdefgh12345678 upstream", f"sent bearer {MASK} upstream"),
        ("pulling https://bob:hunter2@example.com/x", f"pulling https://bob:{MASK}@example.com/x"),
        # not secrets: counts, paths, short lookalikes, names that only contain a word
        (
            "max_tokens=512 MAX_NUM_BATCHED_TOKENS=8192",
            "max_tokens=512 MAX_NUM_BATCHED_TOKENS=8192",
        ),
        ("tokenizer=/models/q", "tokenizer=/models/q"),
        ("keyboard=qwerty monkey=1", "keyboard=qwerty monkey=1"),
        ("sent bearer abc upstream", "sent bearer abc upstream"),
        ("hf_short sk-short", "hf_short sk-short"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        ("Loading weights took 71.20 seconds", "Loading weights took 71.20 seconds"),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("API_TOKENS", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("db_password", True),
        ("DB_PASS", True),
        ("x.auth", True),
        ("pwd", True),
        ("key", True),
        ("api-key", True),
        ("num_tokens_secret", True),
        ("max_tokenskey", True),  # what remains once a count is taken out is judged alone
        ("HF_HOME", False),
        ("max_tokens", False),
        ("tokenizer", False),
        ("monkey", False),
        ("keyboard", False),
        ("passed", False),
    ],
)
def test_secret_name(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_redact_obj() -> None:
    obj = {
        "env": [
            {"name": "HF_TOKEN", "value": "abc"},
            {"name": "HF_HOME", "value": "/h"},
            {"name": "HF_TOKEN", "value": 5},
        ],
        "api_key": "abc",
        "max_tokens": "16",
        "tokens": 3,
        "note": f"HF_TOKEN={SECRET}",
        "nested": [{"password": "p"}, "plain"],
    }
    assert redact_obj(obj) == {
        "env": [
            {"name": "HF_TOKEN", "value": MASK},
            {"name": "HF_HOME", "value": "/h"},
            {"name": "HF_TOKEN", "value": 5},
        ],
        "api_key": MASK,
        "max_tokens": "16",
        "tokens": 3,
        "note": f"HF_TOKEN={MASK}",
        "nested": [{"password": MASK}, "plain"],
    }
    # `then` runs on every string and key, after redaction
    assert redact_obj({"k": ["a", "token=x"], "secret": "s"}, then=str.upper) == {
        "K": ["A", f"TOKEN={MASK}".upper()],
        "SECRET": MASK,
    }
    assert redact_obj(7) == 7


def test_redact_env() -> None:
    assert redact_env({"HF_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y", "HF_HOME": "/h"}) == {
        "HF_TOKEN": MASK,
        "AWS_SECRET_ACCESS_KEY": MASK,
        "HF_HOME": "/h",
    }


def test_reports_never_carry_secrets(tmp_path: Path) -> None:
    event = f"inject: serving: env set HF_TOKEN={SECRET}"
    sc = scenario_result(
        "t",
        verdict=Verdict.PASSED,
        assertions=[],
        timeline=[TimelineEvent(ts=NOW, source="runner", clock="c", event=event)],
        evidence=[],
        notes=[f"--api-key {SECRET}"],
    )
    r = run_result(sc)
    write_reports(r, tmp_path)
    for f in tmp_path.iterdir():
        assert SECRET not in f.read_text(), f.name


def test_the_result_the_terminal_prints_is_the_redacted_one(tmp_path: Path) -> None:
    """What `run` prints (a failed assertion's observed text quotes engine log lines) is the
    result as the reports hold it, not the raw one."""
    from runner.results.schema import Assertion, Phase

    failed = Assertion(
        phase=Phase.RECOVER,
        name="recover 2: fix",
        verdict=Verdict.FAILED,
        expected="ready",
        observed=f"its last error line: launching with --api-key {SECRET}",
    )
    sc = scenario_result("t", verdict=Verdict.FAILED, assertions=[failed])
    written = write_reports(run_result(sc), tmp_path)
    assert SECRET not in written.model_dump_json()
    assert written.scenarios[0].assertions[0].observed.startswith("its last error line")
