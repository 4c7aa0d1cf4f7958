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
        ("Cookie", True),  # an http step's header
        ("SESSION_COOKIE", True),
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


# ---- what a command step's argv and output carry --------------------------------------------

PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun"
GHP = "ghp_" + "R7x2Kq9LmN4pWz8TvB3cYd6FgH1jS5aUe0oI"
AKIA = "AKIAQYLPMN5HHHFPZAM2"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6ImpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
# (text, what must not remain); the review's reproductions
GAPS = [
    ("curl -u alice:CurlPass123 https://api.example/x", "CurlPass123"),
    ("curl --user alice:CurlPass123 https://api.example/x", "CurlPass123"),
    ("curl -ualice:CurlPass123 https://api.example/x", "CurlPass123"),
    ("curl -H 'Cookie: session=CookieVal456; theme=dark' https://x", "CookieVal456"),
    ("Set-Cookie: sid=CookieVal456; Path=/; HttpOnly", "CookieVal456"),
    ("curl -b session=CookieVal456 https://x", "CookieVal456"),
    (
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY[:40]}\n"
        "-----END RSA PRIVATE KEY-----",
        PEM_BODY[:40],
    ),
    (f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_BODY}\n[... 99 bytes", PEM_BODY[:40]),
    (f"[... 99 bytes of output dropped ...]\n{PEM_BODY}\n-----END PRIVATE KEY-----", PEM_BODY),
    (f"pushing with {GHP} now", GHP[4:]),
    (f"AWS_ID={AKIA}", AKIA),
    (f"aws configure set aws_access_key_id {AKIA}", AKIA),
    (f"jwt {JWT} end", JWT[-20:]),
    (f"Authorization header missing; token was {JWT}", JWT.split(".")[1]),
    ("mysql -h db -u root -pMyPass789 shop", "MyPass789"),
    ("mysqldump -u root -p'My Pass789' shop", "Pass789"),
    ("password hunter2", "hunter2"),
    ("vault login -method=userpass username=bob password hunter2", "hunter2"),
]


@pytest.mark.parametrize(("text", "secret"), GAPS)
def test_secrets_a_command_line_or_its_output_shows(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out, out
    assert MASK in out
    assert redact(out) == out  # a report redacts what a step already redacted


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the context stays readable
        ("curl -u alice:pw1234 https://x", f"curl -u alice:{MASK} https://x"),
        ("Cookie: a=b; c=d", f"Cookie: {MASK}"),
        (
            f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}\n-----END EC PRIVATE KEY-----\nnext",
            f"-----BEGIN EC PRIVATE KEY-----{MASK}-----END EC PRIVATE KEY-----\nnext",
        ),
        ("mysql -u root -pMyPass789 shop", f"mysql -u root -p{MASK} shop"),
        ("password hunter2 ok", f"password {MASK} ok"),
        # not secrets: -p without a value, a sentence about a password, a -u without a colon
        ("mysql -u root -p shop", "mysql -u root -p shop"),
        ("Password authentication failed for user bob", None),
        ("the password is wrong", None),
        ("sort -u names.txt", None),
        ("ps -u root", None),
        ("-----BEGIN CERTIFICATE-----", None),
    ],
)
def test_what_the_new_rules_keep(text: str, expected: str | None) -> None:
    assert redact(text) == (text if expected is None else expected)


def test_redaction_of_a_long_hostile_line_is_linear() -> None:
    import time

    for hostile in (
        "-----BEGIN PRIVATE KEY-----" + "A" * 500_000,
        "mysql " + "x " * 250_000,
        "curl -u " + ":" * 500_000,
        "Cookie: " + "a=b; " * 100_000,
        "eyJ" + "a." * 250_000,
    ):
        t0 = time.monotonic()
        redact(hostile)
        assert time.monotonic() - t0 < 2, hostile[:20]


def test_a_command_steps_argv_and_output_never_reach_a_report(tmp_path: Path) -> None:
    """The review's reproduction: a `command` step's argv (the run's timeline) and its output
    (redacted as a whole when captured, then one evidence line a line) in result.json, report.md
    and report.html."""
    from runner.results.schema import Evidence, EvidenceLine
    from runner.run.stepexec import _Capture
    from runner.spec.usersteps import CommandStep, describe_user_step

    argv = [
        "sh",
        "-c",
        f"curl -u alice:CurlPass123 -H 'Cookie: sid=CookieVal456' https://x; "
        f"mysql -u root -pMyPass789 shop; echo password hunter2 {GHP} {AKIA} {JWT}",
    ]
    step = CommandStep(kind="command", argv=argv)
    output = (
        "fetched with curl -u alice:CurlPass123\n"
        "> Cookie: sid=CookieVal456\n"
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\n"
        f"token {GHP}\naws {AKIA}\n{JWT}\n"
        "+ mysql -u root -pMyPass789 shop\n"
        "mysql: [Warning] Using a password on the command line interface can be insecure.\n"
        "password hunter2\n"
    )
    capture = _Capture()
    capture.feed(output.encode())
    lines = [EvidenceLine(ts=None, text=ln) for ln in capture.text().splitlines()]
    sc = scenario_result(
        "t",
        verdict=Verdict.FAILED,
        timeline=[
            TimelineEvent(
                ts=NOW, source="runner", clock="c", event=f"inject: {describe_user_step(step)}"
            )
        ],
        evidence=[Evidence(title="inject: command: output", lines=lines)],
        notes=[" ".join(argv)],
    )
    write_reports(run_result(sc), tmp_path)
    written = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert {"result.json", "report.md", "report.html"} <= written.keys()
    secrets = ["CurlPass123", "CookieVal456", PEM_BODY[:32], GHP[4:], AKIA]
    secrets += [JWT.split(".")[1], "MyPass789", "hunter2"]
    for name, text in written.items():
        assert [s for s in secrets if s in text] == [], name


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # a detector's token is masked; the separator and the next word stay
        ("build AP1234567890 finished in 3 s", f"build {MASK} finished in 3 s"),
        ("key=AKCabcdefghij123 next", f"key={MASK} next"),
        # -u and -U are passwords only on a curl command line
        ("sort -u file:1 notes.txt", "sort -u file:1 notes.txt"),
        ("ls -U a:b", "ls -U a:b"),
    ],
)
def test_what_is_no_secret_around_a_token_stays_readable(text: str, shown: str) -> None:
    assert redact(text) == shown
