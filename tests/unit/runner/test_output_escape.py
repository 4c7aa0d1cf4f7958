"""Text printed through rich comes out as it was: regexes with escaped brackets, tag-like text."""

from __future__ import annotations

import pytest
from rich.console import Console

from runner.cli.output import escape

CASES = [
    r"^\[rank1\]:\[W\d{4} [\d:.]+ ProcessGroupNCCL\.cpp:\d+\]",
    r"a\[Wb",
    "x\\\\[W",
    "[bold]x[/bold]",
    r"\[bold]",
    "plain [W] ok",
    "\\\\\\[",
]


@pytest.mark.parametrize("text", CASES)
def test_printed_as_written(text: str) -> None:
    console = Console(width=400)
    with console.capture() as cap:
        console.print(escape(text), end="")
    assert cap.get() == text
