"""An engine that stopped making progress, read from its periodic stats lines.

A hung engine core logs nothing of its own: the API server goes on logging the stats line every
VLLM_LOG_STATS_INTERVAL (10 s; the API server's `_force_log` task calls AsyncLLM.do_log_stats,
vllm/entrypoints/openai/server_utils.py:449 in 0.19.1) from the last figures the engine core
reported (vllm/v1/metrics/loggers.py LoggingStatLogger.log reads `last_scheduler_stats`, which
only a report from the engine core replaces). So a hang reads as stats lines with requests
running, no token made (prompt and generation throughput 0.0) and every scheduler figure after
them (waiting, KV cache usage, hit rates) the same from line to line. An engine that works
changes them: a long prefill fills KV cache blocks, requests finish or arrive.

V1 prints `Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f
tokens/s, Running: %d reqs, Waiting: %d reqs, ...` (0.8.3 on; 0.7.3 and 0.8.0 without the
`Engine 000: ` prefix; several engines' `N Engines Aggregated: `); V0 `Avg prompt throughput:
..., Running: %d reqs, Swapped: %d reqs, Pending: %d reqs, GPU KV cache usage: ...`
(vllm/engine/metrics.py LoggingStatLogger). V1 up to 0.8.3 logs the line at INFO whatever it
says; from 0.8.5 (and V0 in 0.10.2) an interval that made no token after one that made none is
logged at DEBUG, so a paste at the default level shows one line of zeros after a hang, and
repeated ones only with VLLM_LOGGING_LEVEL=DEBUG. V0 logs the line from its own step loop, so a
V0 engine hung inside a step logs none.
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.triage.match import Evidence, Log, find

# the stats line whole: it ends with a percentage (a hit rate, the KV cache usage) or a count of
# requests, so a line a terminal wrapped is matched with its continuation, never cut short
STATS = (
    r"(?:(?:Engine (?P<engine>\d+)|\d+ Engines Aggregated): )?"
    r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<generation>[\d.]+) tokens/s, "
    r"Running: (?P<running>\d+) reqs, (?P<rest>(?:Swapped|Waiting): \d+ reqs.*(?:%|reqs)\.?)\s*$"
)
_HEALTH = r"\"GET /health HTTP/1\.[01]\" 200"
STALLED = "requests running, no token made, the scheduler's figures unchanged"


@dataclass(frozen=True)
class _Stats:
    end: int  # the index after its last line
    evidence: Evidence

    @property
    def key(self) -> tuple[str | None, str | None]:
        """Whose line it is: the node a prefix names, the engine's index."""
        return self.evidence.lines[0].node, self.evidence.captures.get("engine")

    @property
    def stalled(self) -> bool:
        caps = self.evidence.captures
        try:
            made = float(caps["prompt"]) + float(caps["generation"])
            return made == 0 and int(caps["running"]) > 0
        except (KeyError, ValueError):
            return False


def _stats_lines(log: Log) -> list[_Stats]:
    out: list[_Stats] = []
    start = 0
    while (hit := find(log, STATS, STALLED, start)) is not None:
        end, ev = hit
        out.append(_Stats(end, ev))
        start = end
    return out


def find_stall(log: Log, minimum: int) -> list[Evidence] | None:
    """The first run of at least `minimum` consecutive stats lines of one engine that show it
    stalled: quoted up to `minimum`, then its last line, then a /health answered 200 among
    them, if the paste shows one."""
    runs: dict[tuple[str | None, str | None], list[_Stats]] = {}
    found: list[_Stats] | None = None
    for st in _stats_lines(log):
        run = runs.setdefault(st.key, [])
        if found is not None and run is not found:
            continue
        if st.stalled and (
            not run or run[-1].evidence.captures["rest"] == st.evidence.captures["rest"]
        ):
            run.append(st)
            if len(run) >= minimum:
                found = run
        elif found is not None:
            break
        else:
            runs[st.key] = [st] if st.stalled else []
    if found is None:
        return None
    head = found[0].evidence
    # the first quoted line carries how many lines the stall lasts, for the advice
    counted = Evidence(head.description, head.lines, {**head.captures, "lines": str(len(found))})
    quoted = [counted, *(s.evidence for s in found[1:minimum])]
    if len(found) > minimum:
        quoted.append(found[-1].evidence)
    first, last = found[0].evidence.number - 1, found[-1].end
    health = find(log, _HEALTH, "/health still answers 200", first)
    if health is not None and health[1].number <= last:
        quoted.append(health[1])
    return sorted(quoted, key=lambda e: e.number)
