"""Trust on shared machines: what another user, a process on the machine or a scenario's own text
must not be able to do (a planted configuration, a step that outlives its runner, a forged
alert, lab traffic through a proxy, HTML in report.md)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from runner.report import markdown
from runner.results.schema import Assertion, Phase, Verdict
from tests.support.results import run_result, scenario_result

# ---- report.md: raw HTML in a scenario's own text ------------------------------------------

PAYLOAD = "<img src=x onerror=alert(1)>"


def test_report_md_escapes_raw_html() -> None:
    """A Markdown viewer renders the HTML Markdown lets through: every free text (the title, a
    step's name, what was observed, a note) reaches report.md as text, never as a tag."""
    sc = scenario_result(
        PAYLOAD,
        id=f"s{PAYLOAD}",
        title=f"t {PAYLOAD}",
        file=f"scenarios/{PAYLOAD}`<b>x</b>.yaml",
        notes=[f"note {PAYLOAD}"],
        runbooks={"restart <script>alert(2)</script>": f"docs/{PAYLOAD}"},
        assertions=[
            Assertion(
                name=f"recover: step {PAYLOAD}",
                phase=Phase.RECOVER,
                verdict=Verdict.FAILED,
                expected=f"<b>{PAYLOAD}</b>",
                observed=f"exit 1; last output: {PAYLOAD}",
            )
        ],
    )
    md = markdown(run_result(sc))
    rendered = MarkdownIt("commonmark").render(md)  # html: on, as GitHub-like viewers allow
    assert "<img" not in rendered and "<script" not in rendered and "<b>" not in rendered
    # what the viewer shows is the text as written
    assert rendered.count("&lt;img src=x onerror=alert(1)&gt;") >= 6
