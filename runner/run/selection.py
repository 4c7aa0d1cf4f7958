"""Choosing scenarios the way pytest chooses tests: `-k EXPR`, tags, the last run's failures.

`-k` takes words joined by `and`, `or`, `not` and parentheses (`not` binds tightest, then `and`,
then `or`); a word matches a scenario when it is a case-insensitive substring of its id or title.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.errors import InputError
from runner.results.rundirs import run_dirs
from runner.results.schema import Verdict, load_result
from runner.spec.scenario import LoadedScenario

Matcher = Callable[[Callable[[str], bool]], bool]  # given "does this word match", the verdict
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_KEYWORDS = ("and", "or", "not")


def _tokens(expr: str) -> list[tuple[int, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:  # only trailing spaces are left
            break
        out.append((m.start(1) + 1, m.group(1)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.toks = _tokens(expr)
        self.i = 0

    def error(self, what: str) -> InputError:
        col = self.toks[self.i][0] if self.i < len(self.toks) else len(self.expr) + 1
        return InputError(
            f"{what} at column {col} of {self.expr!r}",
            field="-k",
            hint="words joined by and, or, not and parentheses, e.g. 'kv or (tp and not head)'",
        )

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise self.error("expected a word, `not` or `(`; the expression ended")
        self.i += 1
        return tok

    def parse(self) -> Matcher:
        if not self.toks:
            raise self.error("empty expression")
        m = self.or_()
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")
        return m

    def or_(self) -> Matcher:
        parts = [self.and_()]
        while self.peek() == "or":
            self.i += 1
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else lambda has: any(p(has) for p in parts)

    def and_(self) -> Matcher:
        parts = [self.not_()]
        while self.peek() == "and":
            self.i += 1
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else lambda has: all(p(has) for p in parts)

    def not_(self) -> Matcher:
        if self.peek() == "not":
            self.i += 1
            inner = self.not_()
            return lambda has: not inner(has)
        if self.peek() == "(":
            self.i += 1
            inner = self.or_()
            if self.peek() != ")":
                raise self.error("expected `)`")
            self.i += 1
            return inner
        if self.peek() in (*_KEYWORDS, ")"):
            raise self.error(f"expected a word, `not` or `(`, not {self.peek()!r}")
        word = self.take().lower()
        return lambda has: has(word)


def keyword(expr: str) -> Callable[[LoadedScenario], bool]:
    """The `-k` expression as a test on a scenario (InputError, exit 2, when it does not parse)."""
    m = _Parser(expr).parse()

    def test(ls: LoadedScenario) -> bool:
        md = ls.scenario.metadata
        text = (md.id.lower(), md.title.lower())
        return m(lambda word: any(word in t for t in text))

    return test


@dataclass(frozen=True)
class Selection:
    """What the command line asks for; empty: everything."""

    keyword: str | None = None
    tags: tuple[str, ...] = ()
    exclude_tags: tuple[str, ...] = ()

    def __call__(self, scenarios: Sequence[LoadedScenario]) -> list[LoadedScenario]:
        """The scenarios that match `-k`, carry one of `tags` (if any are given) and none of
        `exclude_tags`, in their order."""
        k = keyword(self.keyword) if self.keyword is not None else None
        out = []
        for ls in scenarios:
            tags = set(ls.scenario.metadata.tags)
            if self.tags and not tags & set(self.tags):
                continue
            if tags & set(self.exclude_tags):
                continue
            if k is not None and not k(ls):
                continue
            out.append(ls)
        return out


@dataclass(frozen=True)
class LastFailed:
    """The latest run in a reports folder and the ids of its scenarios that failed or errored
    (`run` None: no run there)."""

    run: Path | None
    ids: frozenset[str]


def last_failed(reports: Path) -> LastFailed:
    """The latest run's failures. Run folders are named by their start time, so the latest is
    the last in name order (reports/latest points at it, and is not a run of its own)."""
    runs = [d / "result.json" for d in run_dirs(reports)]
    if not runs:
        return LastFailed(None, frozenset())
    result = load_result(runs[-1])
    bad = (Verdict.FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE)  # not judged is run again
    return LastFailed(
        runs[-1].parent, frozenset(s.id for s in result.scenarios if s.verdict in bad)
    )
