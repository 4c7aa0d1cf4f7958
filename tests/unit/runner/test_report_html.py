"""report.html's text helpers and order: a long value folded at a word, a change as before →
after, failures above the summary, times in real-world seconds with the lab's in brackets."""

from __future__ import annotations

from pathlib import Path

from runner.report import html
from runner.report.html import arrows, fold, head
from runner.results.schema import Assertion, Phase, Verdict, load_result

DATA = Path(__file__).parents[2] / "data" / "report"


def test_head_keeps_whole_words() -> None:
    text = "dial tcp 127.0.80.13:8000: connect: connection refused"
    assert head(text, 100) == text
    assert head(text, 30) == "dial tcp 127.0.80.13:8000:"
    assert head("VLLM_ALLOW_LONG_MAX_MODEL_LEN_IS_ONE_WORD and more", 10) == (
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN_IS_ONE_WORD"
    )


def test_a_change_reads_before_then_after_with_its_changed_words_marked() -> None:
    assert str(arrows("node1: args --max-model-len 4096 -> --max-model-len <65536>")) == (
        '<span class="change">node1: args <span class="before">--max-model-len <del>4096</del>'
        '</span> <span class="arrow">→</span> '
        '<span class="after">--max-model-len <ins>&lt;65536&gt;</ins></span></span>'
    )
    # nothing shared: the label is what the after side has no counterpart for
    assert str(arrows("node3: management address 127.0.80.13 -> 127.0.80.23")) == (
        '<span class="change">node3: management address <span class="before">'
        '<del>127.0.80.13</del></span> <span class="arrow">→</span> '
        '<span class="after"><ins>127.0.80.23</ins></span></span>'
    )
    assert str(arrows("serving: args M --port 8000 -> M --port 8000 --nnodes 2")) == (
        '<span class="change">serving: args <span class="before">M --port 8000</span> '
        '<span class="arrow">→</span> <span class="after">M --port 8000 <ins>--nnodes 2</ins>'
        "</span></span>"
    )
    assert str(arrows("no change & <b>")) == "no change &amp; &lt;b&gt;"


def test_a_long_value_is_folded_with_all_of_it_inside() -> None:
    text = "word " * 50 + "end"
    got = str(fold(text, 20))
    assert got == (
        '<details class="fold"><summary>word word word word <span class="more">… (253 chars)'
        f'</span></summary><div class="full">{text}</div></details>'
    )


def test_failures_come_before_the_summary_with_their_assertions() -> None:
    run = load_result(DATA / "seven-passed.json")
    bad = Assertion(
        name="verify: time to recover",
        phase=Phase.VERIFY,
        verdict=Verdict.FAILED,
        expected="within 60 s real",
        observed="124.1 s real",
    )
    s = run.scenarios[1].model_copy(update={"verdict": Verdict.FAILED, "assertions": [bad]})
    page = html(run.model_copy(update={"scenarios": [run.scenarios[0], s]}))
    failures, summary = page.index('<section class="failures"'), page.index('class="summary"')
    assert failures < summary
    assert (
        '<dt class="failed-assertion">verify: time to recover <span class="failed">(failed)</span>'
        "</dt>\n<dd>expected: within 60 s real</dd>\n<dd>observed: 124.1 s real</dd>"
    ) in page[failures:summary]
    assert '<details class="scenario" id="dhcp-address-change" open>' in page
    assert '<details class="scenario" id="context-window-overflow">' in page
    # real-world seconds, the lab's in brackets (time scale x100)
    assert "<td>10.8 s [0.108 s lab]</td>" in page


def test_a_passed_run_has_no_failures_section() -> None:
    page = html(load_result(DATA / "seven-passed.json"))
    assert 'class="failures"' not in page
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="gantt"') == 7
