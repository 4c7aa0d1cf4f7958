"""Hostile input to patterns and reports: secrets in every form reach no report file, redaction
and matching take linear time, scenario regexes run on RE2, windows are finite, and control
characters reach neither the terminal nor junit.xml raw."""

from __future__ import annotations

import io
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from runner.cli import output
from runner.cli.main import main
from runner.errors import InventoryError, ScenarioError
from runner.report import write_reports
from runner.results.redact import MASK, redact, redact_env, redact_obj
from runner.results.schema import (
    MAX_EVIDENCE_LINE,
    Assertion,
    Evidence,
    EvidenceLine,
    Phase,
    RunResult,
    Verdict,
)
from runner.spec.inventory_load import load_inventory
from runner.spec.scenario import load_scenario
from runner.triage import triage
from tests.support.results import NOW, run_result, scenario_result

ROOT = Path(__file__).resolve().parents[3]
GOOD = ROOT / "scenarios" / "context-window-overflow.yaml"
IDENTIFYING = (
    r"'User-specified max_model_len \((?P<requested>\d+)\) is greater than the derived "
    r"max_model_len \((?P<key>\w+) ?= ?(?P<derived>[\d.]+)'"
)


def mutate(tmp_path: Path, old: str, new: str, src: Path = GOOD) -> Path:
    text = src.read_text()
    assert old in text, old
    p = tmp_path / src.name
    p.write_text(text.replace(old, new, 1))
    return p


def line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


# ---- redaction -----------------------------------------------------------------------------

LEAKS = [
    ("OPENAI_KEY=k-openai-1 FOO=bar", "k-openai-1"),
    ("WANDB_KEY=wandb-2", "wandb-2"),
    ("DB_PASS=db-pass-3", "db-pass-3"),
    ("PROXY_AUTH=proxy-auth-4", "proxy-auth-4"),
    ('MY_PASSWORD="quoted secret, with comma"', "quoted secret"),
    ('{"HF_TOKEN": "json token 5"}', "json token 5"),
    (
        "non-default args: {'model': 'm', 'hf_token': 'dict-token-6', 'max_model_len': 2048}",
        "dict-token-6",
    ),
    ("vllm serve m --hf-token flag-token-7 --port 8000", "flag-token-7"),
    ("vllm serve m --api-key=flag-key-8", "flag-key-8"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("{'Authorization': 'Basic YWxhZGRpbjpvcGVu'}", "YWxhZGRpbjpvcGVu"),
    ("pip install -i https://alice:url-pass-9@pypi.example/simple x", "url-pass-9"),
    ('HF_TOKEN="unterminated secret value', "unterminated secret"),
    ("password: 'it\\'s a secret'", "s a secret"),
    ("HF_TOKEN=comma,separated", "separated"),
    ("PGPASSWORD=semi;colon", "colon"),
    ("API_TOKENS=plural-token-10", "plural-token-10"),
    ('{"password": 12345678, "x": 1}', "12345678"),
]


@pytest.mark.parametrize(("text", "secret"), LEAKS)
def test_redaction_covers_every_form(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out
    assert MASK in out


@pytest.mark.parametrize(
    "text",
    [
        "Loading weights took 71.20 seconds",
        "GPU KV cache size: 12,345 tokens",
        "non-default args: {'max_num_batched_tokens': 8192, 'tokenizer': 'Qwen/Qwen2.5'}",
        "User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=32768)",
        "monkey=1 passed=2 bypass=3",
    ],
)
def test_redaction_leaves_ordinary_lines(text: str) -> None:
    assert redact(text) == text


def test_names_are_secret_in_env_and_objects() -> None:
    env = {"OPENAI_KEY": "a", "WANDB_KEY": "b", "DB_PASS": "c", "X_AUTH": "d", "HF_HOME": "/h"}
    assert redact_env(env) == {
        "OPENAI_KEY": MASK,
        "WANDB_KEY": MASK,
        "DB_PASS": MASK,
        "X_AUTH": MASK,
        "HF_HOME": "/h",
    }
    obj = {"env": env | {"max_tokens": "16"}, "title": "t"}
    assert redact_obj(obj) == {"env": redact_env(env) | {"max_tokens": "16"}, "title": "t"}
    # an environment list as Kubernetes and Docker write it
    listed = [{"name": "HF_TOKEN", "value": "s3cret"}, {"name": "HF_HOME", "value": "/h"}]
    assert redact_obj(listed) == [{"name": "HF_TOKEN", "value": MASK}, listed[1]]


def _result(
    title: str = "t",
    notes: tuple[str, ...] = (),
    text: str = "x",
    verdict: Verdict = Verdict.FAILED,
) -> RunResult:
    """`text` in every free-text field, with a failed and an erred assertion."""
    sc = scenario_result(
        text,
        id=title,
        title=title,
        file=f"scenarios/{title}.yaml",
        verdict=verdict,
        time_to_fail_s=1.0,
        assertions=[
            Assertion(
                name=title,
                phase=Phase.EXPECT,
                verdict=Verdict.FAILED,
                expected=text,
                observed=text,
                detail=text,
            ),
            Assertion(
                name="e", phase=Phase.EXPECT, verdict=Verdict.ERROR, expected="", observed=text
            ),
        ],
        evidence=[Evidence(title=title, lines=[EvidenceLine(ts=NOW, text=text, highlight=True)])],
        notes=list(notes),
    )
    return run_result(sc, verdict=verdict)


def test_no_report_file_carries_any_form(tmp_path: Path) -> None:
    text = " | ".join(t for t, _ in LEAKS)
    write_reports(_result(notes=tuple(t for t, _ in LEAKS), text=text), tmp_path)
    for f in sorted(tmp_path.iterdir()):
        body = f.read_text()
        for _, secret in LEAKS:
            assert secret not in body, (f.name, secret)


@pytest.mark.parametrize("unit", ["TOKEN", "a_KEY", "HF_TOKEN=", "--api-key ", "x://a:"])
def test_redaction_is_linear(unit: str) -> None:
    line = unit * (1_000_000 // len(unit))
    t0 = time.process_time()  # this process's CPU: a machine busy with other work adds none
    redact(line)
    assert time.process_time() - t0 < 10  # about 0.3 s; a quadratic redaction takes minutes


def test_evidence_lines_are_capped(tmp_path: Path) -> None:
    long = "y" * 1_000_000
    line = EvidenceLine(ts=None, text=long)
    assert len(line.text) <= MAX_EVIDENCE_LINE
    kept = line.text.index("… [truncated")
    assert line.text.endswith(f"… [truncated {1_000_000 - kept} chars]")
    r = _result()
    sc = r.scenarios[0].model_copy(
        update={"evidence": [Evidence(title="log", lines=[EvidenceLine(ts=None, text=long)])]}
    )
    write_reports(r.model_copy(update={"scenarios": [sc]}), tmp_path)
    for name in ("result.json", "report.html"):  # the files that show evidence
        assert "[truncated" in (tmp_path / name).read_text(), name
    for f in tmp_path.iterdir():
        assert f.stat().st_size < 100_000, f.name


# ---- RE2 for user patterns -----------------------------------------------------------------

REDOS = ["((a+))+$", "(a|a)*$", "(a|aa)+b", "a*a*a*a*a*a*b"]


@pytest.mark.parametrize("regex", REDOS)
def test_nested_quantifiers_run_in_linear_time(tmp_path: Path, regex: str) -> None:
    p = mutate(tmp_path, IDENTIFYING, f"'{regex}'")
    text = p.read_text().replace(
        "          requested: {eq: 131072}\n          derived: {eq: 32768}\n"
        "          key: {eq: max_position_embeddings}\n",
        "",
    )
    text = text.replace("        captures:\n", "", 1)
    p.write_text(text)
    ls = load_scenario(p)
    log = "a" * 40 + "!"  # 41 bytes
    t0 = time.monotonic()
    triage(log, [ls])
    triage(("a" * 100_000) + "!", [ls])
    assert time.monotonic() - t0 < 5  # backtracking takes hours on the 41 bytes alone


@pytest.mark.parametrize(
    ("regex", "construct"),
    [
        (r"(?P<n>a)(?P=n)", "backreference"),
        (r"(a)\1", "backreference"),
        (r"foo(?=bar)", "lookahead"),
        (r"(?<!x)foo", "lookbehind"),
        (r"(?>atomic)", "atomic group"),
    ],
)
def test_constructs_re2_lacks_are_refused_at_load(
    tmp_path: Path, regex: str, construct: str
) -> None:
    p = mutate(tmp_path, "'Loading weights took'", f"'{regex}'")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert "RE2" in msg and construct in msg
    assert e.value.field == "expect.signature.absent.1.regex"
    assert e.value.line == line_of(p, regex)


def test_gpu_process_name_is_compiled_at_validation(tmp_path: Path) -> None:
    src = ROOT / "scenarios" / "stray-gpu-process.yaml"
    p = mutate(tmp_path, "{name: '^VLLM::Worker_TP0$'}", "{name: 'VLLM(::Worker'}", src)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field is not None and e.value.field.endswith("present.0.name")
    assert e.value.line == line_of(p, "VLLM(::Worker")
    p = mutate(tmp_path, "{name: '^VLLM::Worker_TP0$'}", "{name: '(?<=x)VLLM'}", src)
    with pytest.raises(ScenarioError, match="lookbehind"):
        load_scenario(p)


def _regexes(o: object, found: list[str]) -> list[str]:
    """Every `regex` of a dumped scenario, and every GPU process-name pattern."""
    if isinstance(o, dict):
        for k, v in o.items():
            if k == "regex" and isinstance(v, str):
                found.append(v)
            if k == "present" and isinstance(v, list):
                found += [m["name"] for m in v]
            _regexes(v, found)
    elif isinstance(o, list):
        for v in o:
            _regexes(v, found)
    return found


def test_every_shipped_pattern_runs_on_re2() -> None:
    from runner.spec.patterns import compile_user
    from runner.spec.scenario import discover

    total = 0
    for f in discover([ROOT / "scenarios"]):
        for rx in _regexes(load_scenario(f).scenario.model_dump(), []):
            compile_user(rx)
            total += 1
    assert total >= 39  # every one the seven scenarios hold


def test_timeline_match_runs_on_re2(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("2026-04-19T10:45:24Z " + "a" * 40 + "!\n")
    res = CliRunner().invoke(main, ["timeline", str(log), "--match", "(?=a)"])
    assert res.exit_code == 2
    assert "RE2" in res.output
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["timeline", str(log), "--match", "(a|aa)+b"])
    assert res.exit_code == 0, res.output
    assert time.monotonic() - t0 < 5


# ---- finite numbers only -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("time_to_fail: {max_s: 30}", "time_to_fail: {max_s: .inf}", "expect.time_to_fail.max_s"),
        ("time_to_fail: {max_s: 30}", "time_to_fail: {max_s: 1e309}", "expect.time_to_fail.max_s"),
        ("time_to_fail: {max_s: 30}", "time_to_fail: {max_s: .nan}", "expect.time_to_fail.max_s"),
        # finite, but a run would wait it out: windows end at a day
        ("time_to_fail: {max_s: 30}", "time_to_fail: {max_s: 1e308}", "expect.time_to_fail.max_s"),
        (
            'prompt: "Introduce yourself in one sentence.", max_tokens: 64}',
            'prompt: "Introduce yourself in one sentence.", max_tokens: 64, temperature: .nan}',
            "baseline.probes.1.temperature",
        ),
        ("args: {--max-model-len: 131072}", "args: {--max-model-len: -.inf}", "inject.0.args"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, old: str, new: str, field: str) -> None:
    p = mutate(tmp_path, old, new)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.field is not None and e.value.field.startswith(field)
    assert e.value.line == line_of(p, new)


def test_non_finite_numbers_are_refused_in_inventories(tmp_path: Path) -> None:
    src = ROOT / "inventories" / "local.yaml"
    p = mutate(tmp_path, "boot_timeout_s: 1800", "boot_timeout_s: .inf", src)
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    assert e.value.field is not None and e.value.field.endswith("boot_timeout_s")
    assert e.value.line == line_of(p, "boot_timeout_s: .inf")


# ---- control characters --------------------------------------------------------------------

HOSTILE = "evil\x1b[2J\x1b]8;;http://x.example/\x1b\\click\x1b]8;;\x1b\\\x00\x07\x9b\ud800\udfff"


def test_reports_with_hostile_content_are_well_formed(tmp_path: Path) -> None:
    for verdict in (Verdict.FAILED, Verdict.ERROR, Verdict.SKIPPED):
        out = tmp_path / verdict.value
        write_reports(
            _result(title=f"t{HOSTILE}", notes=(HOSTILE,), text=HOSTILE, verdict=verdict), out
        )
        tree = ET.parse(out / "junit.xml")  # raises on ill-formed XML
        case = tree.getroot().find("testsuite/testcase")
        assert case is not None and "\\x1b" in case.get("name", "")
        for f in out.iterdir():
            body = f.read_text()
            assert "\x1b" not in body and "\x00" not in body and "\x9b" not in body, f.name


def test_terminal_output_has_no_raw_control_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    console = output._Console(file=buf, force_terminal=False, highlight=False)
    monkeypatch.setattr(output, "out", console)
    monkeypatch.setattr(output, "err", console)
    output.run_summary(_result(title=f"t{HOSTILE}", text=HOSTILE), f"reports/{HOSTILE}")
    output.message(HOSTILE)
    output.out.print(f"raw {HOSTILE}")  # a caller that forgot to escape
    text = buf.getvalue()
    assert "\\x1b" in text
    for ch in ("\x1b", "\x00", "\x07", "\x9b"):
        assert ch not in text, repr(ch)


def test_terminal_keeps_its_own_styling() -> None:
    buf = io.StringIO()
    # a colour terminal whatever TERM says (CI's may be `dumb`, where rich styles nothing)
    console = output._Console(
        file=buf, force_terminal=True, color_system="standard", highlight=False
    )
    console.print(f"[bold]ok[/] {output.escape(HOSTILE)}")
    text = buf.getvalue()
    assert "\x1b[1mok" in text  # rich's style codes still work
    assert "\x1b[2J" not in text and "\x1b]8" not in text and "\x00" not in text
    assert isinstance(console, Console)


def test_triage_prints_hostile_log_lines_escaped(tmp_path: Path) -> None:
    log = tmp_path / "hostile.log"
    log.write_text(
        textwrap.dedent(
            """\
            ValidationError: 1 validation error for ModelConfig\x1b[2J
            User-specified max_model_len (131072) is greater than the derived max_model_len (max_position_embeddings=32768)\x1b]8;;http://x/\x1b\\
            """
        )
    )
    res = CliRunner().invoke(main, ["triage", str(log), "--scenarios", str(ROOT / "scenarios")])
    assert res.exit_code in (0, 1), res.output
    assert "context-window-overflow" in res.output
    assert "\x1b" not in res.output
