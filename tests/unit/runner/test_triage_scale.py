"""Triage in time linear in the log's size: one search per pattern over the whole log, windows
of lines tried only where that search finds something, the same findings as trying every
window at every line, and a budget of lines and time."""

from __future__ import annotations

import importlib
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import runner.triage.match as match
from runner.cli.main import main
from runner.spec.scenario import discover, load_scenario
from runner.triage import BudgetExceeded, normalise, triage
from runner.triage.match import Log, find, unanchored

# the module, not the function runner.triage exports under its name
normalise_module = importlib.import_module("runner.triage.normalise")
ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]
CORPUS = ROOT / "tests" / "data" / "triage"
FAILURES = "".join(
    (CORPUS / n).read_text() for n in ("several-svc-then-kv.log", "seed000-worker-heartbeat.log")
)


def short_lines(n: int) -> str:
    """Lines that continue one another (every one could start a wrapped message), a record now
    and then: the shape that made every line's windows be tried."""
    shapes = [f"  step {{i}} of shard {k}: ok" for k in range(6)] + ["INFO tick {i}", ""]
    return "".join(shapes[i % len(shapes)].format(i=i) + "\n" for i in range(n))


class Counting:
    def __init__(self, rx: Any, counter: list[int]) -> None:
        self.rx, self.counter = rx, counter

    def search(self, *args: Any) -> Any:
        self.counter[0] += 1
        return self.rx.search(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rx, name)


def test_searches_grow_with_what_matches_not_with_the_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = [0]
    compile_user = match.compile_user
    monkeypatch.setattr(match, "compile_user", lambda p: Counting(compile_user(p), counter))
    if hasattr(match, "_finder"):
        finder = match._finder
        monkeypatch.setattr(match, "_finder", lambda p: Counting(finder(p), counter))
    ids = lambda text: [f.scenario.scenario.metadata.id for f in triage(text, SCEN)]  # noqa: E731
    found = ids(FAILURES)
    few = counter[0]
    counter[0] = 0
    assert ids(short_lines(20_000) + FAILURES) == found
    # trying each line's windows took about 14 searches a line (280,000 here)
    assert counter[0] < few + 200, (few, counter[0])


def every_window(log: Log, regex: str, start: int = 0) -> Any:
    """The reference: every window at every line, in order."""
    rx = match.compile_user(regex)
    anchored = "^" in regex or "$" in regex
    for i in range(start, len(log.lines)):
        hit = match._window(log, rx, match._compiled_loose(regex), i, anchored, regex)
        if hit is not None:
            return hit
    return None


WORDS = ["VLLM_PO", "RT", "a URI.", "This", "foo", "-x", "bar", "tcp://1.2.3.4:80", "appears"]
HEADS = ["", "INFO ", "(EngineCore pid=1) ", "[pod/a/c] ", "[pod/b/c] ", "  ", "> "]
PATTERNS = [
    r"VLLM_PORT 'tcp",
    r"VLLM_PORT",
    r"^RT",
    r"foo$",
    r"\bfoo bar\b",
    r"\b-x",
    r"a URI\. This",
    r"^INFO foo",
    r"(?P<w>\w+) appears",
    r"foo.*bar",
    r"This\s+foo",
    r"^$",
    r"x$|^foo",
    r"[^a-z]RT",
]


def random_log(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 30)):
        words = rng.choices(WORDS, k=rng.randint(0, 3))
        lines.append(rng.choice(HEADS) + rng.choice([" ", ""]).join(words))
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(60))
def test_the_one_pass_finds_what_every_window_finds(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(20):
        log = Log(normalise(random_log(rng)))
        for regex in PATTERNS:
            start = rng.randint(0, 3)
            got, want = find(log, regex, start=start), every_window(log, regex, start)
            assert got == want, (regex, start, [ln.text for ln in log.lines])


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"^\[rank\d+\] a$", r"\[rank\d+\] a"),
        (r"\bfoo\B|\Abar\z", r"foo|bar"),
        (r"[^$]^x[]^]y[[:alpha:]^]", r"[^$]x[]^]y[[:alpha:]^]"),
        (r"\\b\^\$\Q^$\E\p{^Greek}", r"\\b\^\$\Q^$\E\p{^Greek}"),
        (r"ab\b{2}c^*", r"ab(?:){2}c(?:)*"),  # a quantifier stays on what it repeated
    ],
)
def test_unanchored_takes_out_only_assertions(pattern: str, expected: str) -> None:
    assert unanchored(pattern) == expected


def test_a_log_over_the_line_budget_is_refused_before_it_is_read() -> None:
    with pytest.raises(BudgetExceeded, match=r"the log has 1001 lines, more than triage reads"):
        triage(short_lines(1001), SCEN, max_lines=1000)
    assert triage(short_lines(1000) + FAILURES.splitlines()[0], SCEN, max_lines=1001)


def test_a_log_not_triaged_in_time_is_stopped() -> None:
    with pytest.raises(BudgetExceeded, match=r"did not finish within its time budget \(0\.001 s\)"):
        triage(short_lines(300_000) + FAILURES, SCEN, timeout_s=0.001)


def test_the_command_says_which_budget_and_exits_2(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text(short_lines(50) + FAILURES)
    args = ["triage", "--scenarios", str(ROOT / "scenarios"), str(log)]
    res = CliRunner().invoke(main, [*args, "--max-lines", "40"])
    assert res.exit_code == 2, res.output
    assert "more than triage reads (40)" in res.output and "--max-lines" in res.output
    res = CliRunner().invoke(main, [*args, "--timeout", "0.000001"])
    assert res.exit_code == 2, res.output
    assert "time budget" in res.output and "--timeout" in res.output
    assert CliRunner().invoke(main, args).exit_code == 0


@pytest.mark.parametrize("block", [1, 2, 3, 7, 8192])
def test_the_joined_texts_whatever_the_block_they_are_written_in(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(match, "_BLOCK", block)
    rng = random.Random(block)
    for _ in range(30):
        lines = normalise(random_log(rng) + rng.choice(["", "\n\u00e9 caf\u00e9 \udcff", "\n"]))
        texts = [ln.text.replace("\udcff", "\ufffd") for ln in lines]
        log = Log(lines)
        records: list[list[str]] = []
        for k, t in enumerate(texts):
            if k and log.ends[k - 1] > k:  # line k continues line k-1
                records[-1].append(t)
            else:
                records.append([t])
        for sep, data in ((" ", log.spaced), ("", log.joined)):
            assert bytes(data) == "\n".join(sep.join(r) for r in records).encode()
        for k, t in enumerate(texts):
            b = t.encode()
            assert log.joined[log.joined_at[k] : log.joined_at[k] + len(b)] == b
            assert log.spaced[log.spaced_at[k] : log.spaced_at[k] + len(b)] == b
        assert [ln.text for ln in log.lines] == texts
        for regex in PATTERNS:
            assert find(log, regex) == every_window(log, regex), regex


@pytest.mark.parametrize(
    "text",
    ["a\r\r\nb", "a\nb\n", "a\r\nb\r\n", "x\x0by\x1cz\u2028w\r", "", "\n\n", "a\r\n\r\nb", "last"],
)
@pytest.mark.parametrize("piece", [1, 2, 5, 1 << 20])
def test_each_line_as_pasted_is_cut_from_the_pasted_text(
    monkeypatch: pytest.MonkeyPatch, text: str, piece: int
) -> None:
    monkeypatch.setattr(normalise_module, "_PIECE", piece)
    lines = normalise(text * 3)
    assert [ln.original for ln in lines] == (text * 3).splitlines()
    assert [ln.number for ln in lines] == list(range(1, len(lines) + 1))
    assert len(lines) == normalise_module.count_lines(text * 3)
