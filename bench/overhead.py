"""Where a scenario's wall time goes, from its own timeline (result.json): what the scenario
inherently waits at the lab's time scale, what real components cost that does not scale, and what
is left, the runner's and the lab driver's own overhead.

Each second of a scenario's wall time is counted once, in the first of these that covers it:

1. scaled: the engine's own phases (each incarnation from its first output to `ready` or to its
   exit), the windows the scenario itself prescribes (a shortcut's `settle_s`), an alert's way to
   firing (its `for:`, scrape and evaluation intervals, all scaled) and the wait for another
   node's lines (`elsewhere`: a heartbeat timeout, scaled);
2. process start and stop: an engine process from spawn to its first output (interpreter and
   imports) and from the lab's stop to its exit (uvicorn's graceful shutdown) - unscaled, as
   `vllm serve`'s own;
3. Prometheus configuration loads: a reload until every target is scraped (its discovery hands
   targets over every 5 s of wall time, unscaled);
4. runner and lab control: the rest (probes, applying changes, the event plumbing).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from runner.spec.kinds import Outcome
from runner.spec.scenario import Scenario

Interval = tuple[float, float]
CATEGORIES = ("scaled", "process start/stop", "Prometheus loads", "runner and lab control")


def _merge(xs: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in sorted(x for x in xs if x[1] > x[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(xs: list[Interval], cover: list[Interval]) -> list[Interval]:
    """Parts of the (merged) intervals `xs` that no interval of `cover` (merged) covers."""
    out = []
    for a, b in xs:
        cur = a
        for c, d in cover:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def _length(xs: list[Interval]) -> float:
    return sum(b - a for a, b in xs)


def split(
    sc: dict[str, Any], scenario: Scenario, scale: float, allowance: float
) -> dict[str, float]:
    """Seconds of the scenario's wall time in each of CATEGORIES (they add up to the wall)."""
    t0 = datetime.fromisoformat(sc["started_at"])
    end = (datetime.fromisoformat(sc["finished_at"]) - t0).total_seconds()
    events = [
        ((datetime.fromisoformat(e["ts"]) - t0).total_seconds(), e["source"], e["event"])
        for e in sc["timeline"]
        if not e["source"].startswith("log:")
    ]
    events.sort(key=lambda x: x[0])
    scaled: list[Interval] = []
    starts: list[Interval] = []
    prometheus: list[Interval] = []
    spawned: dict[str, float] = {}
    out_at: dict[str, float] = {}
    fault_at: float | None = None
    for t, source, text in events:
        node = source.removeprefix("lab:")
        if source == "runner":
            if fault_at is None and text.startswith("inject:"):
                fault_at = t
            m = re.match(r"recover (\d+): ", text)
            if m:
                step = scenario.recover[int(m.group(1)) - 1]
                if step.outcome is Outcome.DOES_NOT_RESTORE and step.settle_s:
                    scaled.append((t, t + step.settle_s / scale + allowance))
        elif source == "prometheus":
            m = re.search(r"scraped ([\d.]+) s later", text)
            if m:
                prometheus.append((t - float(m.group(1)), t))
            elif "firing" in text and fault_at is not None:
                scaled.append((fault_at, t))
        elif text.startswith("started incarnation"):
            spawned[node] = t
        elif text == "first_output" and node in spawned:
            starts.append((spawned.pop(node), t))
            out_at[node] = t
        elif (text == "ready" or text.startswith("exited with code")) and node in out_at:
            scaled.append((out_at.pop(node), t))
        elif text.startswith("stopped by the lab"):
            out_at.pop(node, None)
            m = re.search(r"([\d.]+) s after SIGTERM", text)
            if m:  # the local lab says when it asked (compose, Kubernetes: counted as control)
                starts.append((t - float(m.group(1)), t))
    if scenario.expect.elsewhere:
        # from the failure to the phase after `expect`: the other node's lines, then the checks
        seen = next((t for t, s, x in events if x.startswith("failure observed")), None)
        after = next(
            (t for t, s, x in events if s == "runner" and x in ("phase detect", "phase recover")),
            None,
        )
        if seen is not None and after is not None:
            scaled.append((seen, after))
    whole = [(0.0, end)]
    a = _merge([(max(0.0, x), min(end, y)) for x, y in scaled])
    b = _minus(_merge(starts), a)
    covered = _merge([*a, *b])
    c = _minus(_merge(prometheus), covered)
    rest = _minus(whole, _merge([*covered, *c]))
    return dict(zip(CATEGORIES, (_length(a), _length(b), _length(c), _length(rest)), strict=True))
