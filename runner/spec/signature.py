"""Failure signatures: ordered regexes with checked captures, and patterns that must be absent.

The patterns come from scenario files and run on RE2 (runner.spec.patterns): linear time.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.spec.expectations import CaptureCheck, Pattern
from runner.spec.patterns import compile_user
from vllmfacts.startup import LogLine

MAX_LINE = 20_000  # bound the text any one regex sees


@dataclass(frozen=True)
class PatternResult:
    pattern: Pattern
    matched: bool
    line_index: int | None = None
    line: str | None = None
    captures: dict[str, str] = field(default_factory=dict)
    failed_checks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.matched and not self.failed_checks


@dataclass(frozen=True)
class SignatureResult:
    in_order: list[PatternResult]
    absent: list[PatternResult]  # matched=True here means the forbidden pattern WAS found

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.in_order) and not any(r.matched for r in self.absent)


# the comparisons scenario checks may name (capture checks, the promql probe)
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}


def _num(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return v
    return v


def check_captures(checks: dict[str, CaptureCheck], caps: dict[str, str]) -> list[str]:
    failed = []

    def resolve(v: Any) -> Any:
        if isinstance(v, str) and v.startswith("{") and v.endswith("}"):
            return _num(caps.get(v[1:-1]))
        return _num(v)

    for name, chk in checks.items():
        got = _num(caps.get(name))
        spec = chk.model_dump(by_alias=True, exclude_none=True)
        for op, want in spec.items():
            if op == "in":
                wants = [resolve(w) for w in want]
                if got not in wants:
                    failed.append(f"{name}={caps.get(name)} not in {want}")
                continue
            w = resolve(want)
            try:
                ok = COMPARE[op](got, w)
            except TypeError:
                ok = False
            if not ok:
                failed.append(f"{name}={caps.get(name)} is not {op} {want}")
    return failed


def match(
    lines: Sequence[LogLine], in_order: Sequence[Pattern], absent: Sequence[Pattern] = ()
) -> SignatureResult:
    texts = [ln.text[:MAX_LINE] for ln in lines]
    results: list[PatternResult] = []
    pos = 0
    for pat in in_order:
        rx = compile_user(pat.regex)
        found = None
        first_bad: PatternResult | None = None
        for i in range(pos, len(texts)):
            m = rx.search(texts[i])
            if not m:
                continue
            caps = {k: v for k, v in m.groupdict().items() if v is not None}
            bad = check_captures(pat.captures, caps)
            r = PatternResult(pat, True, i, texts[i], caps, bad)
            if not bad:
                found = r
                break
            first_bad = first_bad or r
        result = found or first_bad or PatternResult(pat, False)
        results.append(result)
        if result.line_index is not None:  # the next pattern looks after the line this one names
            pos = result.line_index + 1
    absents = []
    for pat in absent:
        rx = compile_user(pat.regex)
        hit = next(((i, t) for i, t in enumerate(texts) if rx.search(t)), None)
        absents.append(
            PatternResult(pat, hit is not None, hit[0] if hit else None, hit[1] if hit else None)
        )
    return SignatureResult(results, absents)
