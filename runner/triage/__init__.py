"""`gameday triage`: name the known failures a pasted log shows.

The knowledge is the scenario files themselves. A scenario is recognised when every pattern its
signature marks `identifies: true` matches, in order; a signature another node logs (`elsewhere`)
is recognised by its identifying patterns, or by all its patterns where it marks none; a failure
only a client sees (a refusal an inference probe expects) by the error it must be answered
with, which is what a client pastes. Absent
patterns and capture checks are not applied: a `--tail` excerpt proves nothing by what it lacks,
and a log from another model or length is the same failure. Logs are normalised first
(runner.triage.normalise) and wrapped messages matched across lines (runner.triage.match).
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from runner.spec.expectations import CaptureCheck, NodeSignature, Pattern, TriageSignature
from runner.spec.kinds import Outcome
from runner.spec.probes import AnyProbe, InferenceProbe
from runner.spec.scenario import LoadedScenario, Scenario
from runner.spec.signature import check_captures
from runner.triage.advice import advise
from runner.triage.cause import shows_cause
from runner.triage.cut import cut_pattern, find_cut
from runner.triage.garbled import find_garbled
from runner.triage.match import Evidence, Log, find, find_in_order
from runner.triage.normalise import (
    BudgetExceeded,
    Deadline,
    Line,
    count_lines,
    fold_typography,
    normalise,
)
from runner.triage.oom import find_held_by_others
from runner.triage.stall import find_stall
from vllmfacts import startup
from vllmfacts.startup import StartupPhase
from vllmfacts.wording import Era, Platform

__all__ = [
    "ANSWERED",
    "MAX_LINES",
    "TIMEOUT_S",
    "BudgetExceeded",
    "Finding",
    "RecoverySource",
    "Sighting",
    "identifying",
    "normalise",
    "signatures",
    "triage",
]

# A log's budget: a million short lines take a few seconds and a few hundred MB; a log past these
# is refused (or stopped) with a message rather than left to run for minutes.
MAX_LINES = 2_000_000
TIMEOUT_S = 60.0

# what only a serving engine logs: a failure after these is a serving-phase failure
_SERVING = re.compile(
    r"EngineDeadError|EngineCore encountered a fatal error|Avg prompt throughput"
    r"|\"(?:POST|GET) /v1/|Running: \d+ reqs"
    # a traceback through the engine's loop, which runs only once it has started
    r"|vllm/v1/engine/core\.py\", line \d+, in (?:run_busy_loop|_process_engine_step)"
    r"|vllm/engine/multiprocessing/engine\.py\", line \d+, in (?:run_engine_loop|engine_step)"
    r"|sglang/srt/(?:managers/scheduler(?:_pp_mixin)?|disaggregation/(?:decode|prefill))\.py\", "
    r"line \d+, in (?:run_event_loop|dispatch_event_loop|event_loop_\w+)"
    # the same loop as run_scheduler_process's call into it, the frame's source line
    r"|^\s*scheduler\.(?:run_event_loop|event_loop_\w+)\(\)\s*$"
)
MARKERS = [*startup.MARKERS, (StartupPhase.SERVING, _SERVING)]
_ORDER = list(StartupPhase)


@dataclass(frozen=True)
class Sighting:
    """One node's view of the failure: `view` says whose log it reads as ("the head's", "a
    worker's", "the serving node's"), `node` the scenario's name for that node and `pod` the
    node or pod a collector's prefix named."""

    view: str
    node: str
    pod: str | None
    evidence: tuple[Evidence, ...]
    releases: str | None = None  # the per_vllm releases whose wording matched, if dated
    note: str | None = None  # that entry's note: what those releases print, and where
    # the paste is cut: "message" (its start only), "raise", "call" (at the call into the check
    # that raises it), "cause" (before the root cause) or "before" (before the line `lacks` says)
    cut: str | None = None
    when: str | None = None  # the scenario's triage signature that matched: when a log shows it
    lacks: str | None = None  # for a paste cut "before": what it lacks, in the scenario's words
    # the triage entry's own recovery and shortcuts, for a cause other than the scenario's
    recover: tuple[str, ...] = ()
    shortcuts: tuple[str, ...] = ()
    # read from a death another failure may have caused: an engine's death wrapper, whose root
    # cause the engine logs beside it, or a process that aborted (the entry's after_cause)
    wrapper: bool = False
    # the entry names a cause of the run's own lines other than the scenario's (names_cause):
    # its recovery stands for the finding
    names_cause: bool = False


class RecoverySource(enum.StrEnum):
    """Where a finding's recovery steps and shortcuts come from."""

    SCENARIO = "scenario"  # the scenario's own steps, tried in its lab
    LINES = "lines"  # the matched triage entries', for another cause or engine than the run's


@dataclass(frozen=True)
class Finding:
    scenario: LoadedScenario
    sightings: tuple[Sighting, ...]
    phase: StartupPhase | None
    phase_source: str  # "log", "scenario" or "none"
    advice: tuple[str, ...]
    fixes: tuple[str, ...]
    shortcuts: tuple[str, ...]
    recovery_source: RecoverySource = RecoverySource.SCENARIO

    @property
    def first_line(self) -> int:
        return min(s.evidence[0].number for s in self.sightings)

    @property
    def wrapper(self) -> bool:
        """Read only from a death another failure may have caused (an engine's death wrappers,
        a process that aborted): the death, not what caused it."""
        return all(s.wrapper for s in self.sightings)

    @property
    def cut(self) -> bool:
        """The paste was cut short: the failure is named from what is left of it."""
        return any(s.cut for s in self.sightings)

    @property
    def releases(self) -> tuple[str, ...]:
        """The vLLM releases whose own wording the log shows (per_vllm entries that date one);
        empty for the wording of the releases the labs run."""
        return tuple(dict.fromkeys(s.releases for s in self.sightings if s.releases))


def identifying(patterns: Sequence[Pattern], all_if_none: bool = False) -> list[Pattern]:
    marked = [p for p in patterns if p.identifies]
    return marked if marked or not all_if_none else list(patterns)


Signature = tuple[str, str, list[Pattern], str | None, TriageSignature | None]


def signatures(ls: LoadedScenario) -> list[Signature]:
    """(view, node, identifying patterns, releases, triage entry) of every signature the
    scenario declares, on every lab kind it runs on, for every vLLM version and platform (a
    pasted log may be any's), each once; then those of its per_vllm entries for releases no lab
    runs, with the releases they date; then its triage entries (the fault as logs outside its
    run show it), all their patterns where they mark none identifying."""
    out: list[Signature] = []
    seen: set[tuple[str, ...]] = set()
    variants: list[tuple[Scenario, str | None]] = [
        (ls.scenario.for_lab(kind, vllm, platform), None)
        for kind, vllm, platform in itertools.product(ls.scenario.labs, Era, Platform)
    ]
    variants += [
        (ls.scenario.model_copy(update={"expect": entry.expect}), releases)
        for releases, entry in ls.scenario.wordings().items()
    ]
    for sc, releases in variants:
        group = bool(sc.expect.elsewhere)
        sigs: list[tuple[str, str, list[Pattern]]] = []
        if sc.expect.signature:
            view = "the head's" if group else "the serving node's"
            sigs.append((view, sc.target, identifying(sc.expect.signature.in_order)))
        sigs += _elsewhere(sc.expect.elsewhere)
        sigs += _refusals(sc.expect.probes, sc.target)
        for view, node, pats in sigs:
            key = (view, *(p.regex for p in pats))
            if pats and key not in seen:
                seen.add(key)
                out.append((view, node, pats, releases, None))
    for entry in ls.scenario.triage:
        pats = identifying(entry.in_order, all_if_none=True)
        # entries without patterns differ by what they read instead
        kind = f"{entry.stalled_stats}/{entry.text_check}/{entry.held_by_others}"
        key = (entry.view, kind, *(p.regex for p in pats))
        if key not in seen:
            seen.add(key)
            out.append((entry.view, entry.node or ls.scenario.target, pats, None, entry))
    return out


def _elsewhere(entries: Sequence[NodeSignature]) -> list[tuple[str, str, list[Pattern]]]:
    """One signature per node, over all of its lists (a node's lines of one stream in each): the
    patterns marked identifying in any of them, else all of them."""
    nodes: dict[str, str] = {}
    for e in entries:
        nodes.setdefault(e.node, e.view)
    return [
        (
            view,
            node,
            identifying([p for e in entries if e.node == node for p in e.in_order], True),
        )
        for node, view in nodes.items()
    ]


ANSWERED = "the error a client is answered with"


def _refusals(probes: Sequence[AnyProbe], target: str) -> list[tuple[str, str, list[Pattern]]]:
    """What a client is answered where an inference probe expects a refusal with its error."""
    return [
        (
            "a client's",
            p.node or target,
            [Pattern(regex=p.expect_error, identifies=True, description=ANSWERED)],
        )
        for p in probes
        if isinstance(p, InferenceProbe) and p.expect_error is not None
    ]


def _marker_lines(log: Log) -> list[tuple[int, StartupPhase]]:
    """(the first line index, phase) of every start-up marker the log shows."""
    found = [(log.first(rx), p) for p, rx in MARKERS]
    return [(hit[0], p) for hit, p in found if hit is not None]


def phase_of(
    log: Log | Sequence[Line],
    last: int,
    declared: StartupPhase | None,
    markers: list[tuple[int, StartupPhase]] | None = None,
) -> tuple[StartupPhase | None, str]:
    """The furthest phase shown by the log's own lines up to line number `last`, or by the
    failure itself (the phase the scenario declares for it), whichever is later; else none.
    `markers` are the log's (_marker_lines), where they have been read once for several
    findings."""
    log = log if isinstance(log, Log) else Log(log)
    shown = _marker_lines(log) if markers is None else markers
    best = max((_ORDER.index(p) for k, p in shown if k < last), default=-1)
    if declared is not None and _ORDER.index(declared) > best:
        return declared, "scenario"
    return (_ORDER[best], "log") if best >= 0 else (None, "none")


def _flat(text: str | None) -> str:
    """A scenario's folded YAML text as one line (a `>` block ends in a newline)."""
    return " ".join((text or "").split())


def _finding(
    ls: LoadedScenario,
    sightings: list[Sighting],
    log: Log,
    markers: list[tuple[int, StartupPhase]],
) -> Finding:
    sc = ls.scenario
    last = max(s.evidence[-1].lines[-1].number for s in sightings)
    phase, source = phase_of(log, last, sc.expect.phase, markers)
    evidence = [(ev.captures, ev.text) for s in sightings for ev in s.evidence]
    # a sighting's own recovery stands for the finding where one names the cause of the others'
    # lines (names_cause), or where every sighting brings one; otherwise the finding shows the
    # scenario's own cause, and keeps the scenario's steps
    own = next((s for s in sightings if s.names_cause), None)
    if own is None and all(s.recover for s in sightings):
        own = sightings[0]
    fixes = tuple(s.name for s in sc.recover if s.outcome is Outcome.RESTORES)
    shortcuts = tuple(
        f"{s.name}: {_flat(s.why) or 'does not restore service'}"
        + (f" [FORBIDDEN: {_flat(s.forbidden)}]" if s.forbidden else "")
        for s in sc.recover
        if s.outcome is Outcome.DOES_NOT_RESTORE
    )
    return Finding(
        scenario=ls,
        sightings=tuple(sightings),
        phase=phase,
        phase_source=source,
        advice=tuple(advise(evidence, log)),
        fixes=own.recover if own else fixes,
        shortcuts=own.shortcuts if own else shortcuts,
        recovery_source=RecoverySource.LINES if own else RecoverySource.SCENARIO,
    )


def _distinct(sightings: list[Sighting]) -> list[Sighting]:
    """In the order of their first line, each seen once: one view's sighting whose lines another
    view of the same node already quotes (a platform's or release's signature that shares an
    identifying pattern with the shared one) says nothing more."""

    def numbers(s: Sighting) -> set[int]:
        return {e.number for e in s.evidence}

    by_size = sorted(sightings, key=lambda s: -len(s.evidence))
    kept: list[Sighting] = []
    for s in by_size:
        if not any(k.node == s.node and numbers(s) <= numbers(k) for k in kept):
            kept.append(s)
    return sorted(kept, key=lambda s: s.evidence[0].number)


@cache
def _folded(regex: str) -> str:
    return fold_typography(regex)


def triage(
    text: str,
    scenarios: Sequence[LoadedScenario],
    max_lines: int = MAX_LINES,
    timeout_s: float = TIMEOUT_S,
) -> list[Finding]:
    """The known failures `text` shows, in the order they first appear (an engine's death
    after the other failures of its run, which caused it: _causes_first). Raises BudgetExceeded
    for a log of more than `max_lines` lines (before reading it) or one not triaged within
    `timeout_s` seconds: time and memory grow with the log's size, once."""
    deadline = Deadline.after(timeout_s)
    count = count_lines(text)
    if count > max_lines:
        raise BudgetExceeded(
            f"the log has {count} lines, more than triage reads ({max_lines}); nothing is "
            "concluded",
            hint="triage the lines around the failure, or raise the budget (--max-lines)",
        )
    log = Log(normalise(text, deadline), deadline)
    log.index(_regexes(scenarios))
    found: list[tuple[LoadedScenario, list[Sighting]]] = []
    for ls in scenarios:
        sightings = _sightings(ls, log)
        if sightings:
            found.append((ls, _distinct(sightings)))
    markers = _marker_lines(log) if found else []
    findings = _most_telling([_finding(ls, sightings, log, markers) for ls, sightings in found])
    return _causes_first(findings, log)


# a line that ends one run of a server or begins the next (vLLM's and uvicorn's own words)
_RUN_BOUNDARY = (
    r"vLLM API server version|Starting vLLM API server|Initializing an? (?:V1 )?LLM engine"
    r"|Started server process|Shutting down|Finished server process"
)


def _causes_first(findings: list[Finding], log: Log) -> list[Finding]:
    """In the order of their first line, except that a death another failure may have caused
    (a wrapper vLLM raises around its cause, a process that aborted) comes after the other
    failures of the same run that the paste shows after it (or on its line, a paste that lost
    its line breaks): the NCCL watchdog that took the
    process down, the GPU that fell off the bus. A failure after the run ended (a restart's) is
    no cause of it."""

    def key(f: Finding) -> tuple[int, int, int]:
        if not f.wrapper:
            return f.first_line, 0, f.first_line
        hit = find(log, _RUN_BOUNDARY, start=f.first_line)
        end = hit[1].lines[0].number if hit is not None else len(log.lines) + 1
        later = [
            g.first_line for g in findings if not g.wrapper and f.first_line <= g.first_line < end
        ]
        return (max(later), 1, f.first_line) if later else (f.first_line, 0, f.first_line)

    return sorted(findings, key=key)


def _regexes(scenarios: Sequence[LoadedScenario]) -> list[str]:
    """Every regex triage may search the log for, as it searches them (runner.triage.match's
    index): the signatures' patterns, the starts of their messages cut short, the ends of
    triage entries."""
    out: list[str] = []
    for ls in scenarios:
        for _, _, pats, _, entry in signatures(ls):
            for p in pats:
                regex = _folded(p.regex)
                cut = cut_pattern(regex)
                out += [regex, cut[0]] if cut else [regex]
            if entry is not None and entry.ended_by is not None:
                out.append(_folded(entry.ended_by.regex))
            if entry is not None and entry.stopped_by is not None:
                out.append(_folded(entry.stopped_by.regex))
            if entry is not None and entry.only_with is not None:
                out.append(_folded(entry.only_with.regex))
            if entry is not None and entry.not_with is not None:
                out.append(_folded(entry.not_with.regex))
    return [*out, _SERVER_START, _SIGNALLED, _RUN_START]


def _sightings(ls: LoadedScenario, log: Log) -> list[Sighting]:
    """The scenario's sightings in the log: by the signatures its runs check; where those show
    nothing, by its triage entries (another moment of the fault, or a part of what the run's
    signature quotes, which adds nothing where the whole is there), the first that matches for
    each view of a node; where those show nothing either, by any of them cut short."""
    sigs = signatures(ls)
    sightings: list[Sighting] = []
    for group in ([s for s in sigs if s[4] is None], [s for s in sigs if s[4] is not None]):
        for view, node, pats, releases, entry in group if not sightings else ():
            if entry is not None and any((s.view, s.node) == (view, node) for s in sightings):
                # a scenario lists its triage entries strongest first (the error before the
                # warning that led to it): one view of a node is told by the first that matches
                continue
            if entry is not None and entry.stalled_stats is not None:
                ev = find_stall(log, entry.stalled_stats)
            elif entry is not None and entry.text_check is not None:
                ev = find_garbled(log, entry.text_check)
            elif entry is not None and entry.held_by_others:
                ev = find_held_by_others(log)
            else:
                # a pattern's literal typography is folded as the pasted text is (normalise)
                # lines a later one shows ended by themselves are no failure: only what
                # follows the last such end is read
                start = 0 if entry is None else _after_last(log, entry.ended_by)
                wanted = [(_folded(p.regex), p.description) for p in pats]
                # a triage entry's checks between captures (a run's checks are its lab's)
                accepts = [_accept(p) for p in pats] if entry is not None else []
                ev = find_in_order(log, wanted, start=start, accepts=accepts)
                # lines a stop of the same run explains are no failure, nor a start-up refusal's
                # words the server started after: a later match may be
                while ev:
                    if entry is None and _warned_then_started(log, ls, ev):
                        resume: int | None = ev[0].number
                    else:
                        resume = _stopped(log, entry, ev[0].number - 1)
                    if resume is None:
                        break
                    ev = find_in_order(log, wanted, start=resume, accepts=accepts)
            if ev and not _with(log, entry):
                ev = None
            if ev:
                how = None
                if entry is not None and entry.cut_before_cause and not shows_cause(log):
                    how = "cause"
                elif entry is not None and entry.cut_before:
                    how = "before"  # the run's signature, which quotes that line, found nothing
                sightings.append(_sighting(ls, view, node, ev, releases, how, entry))
    # lines that name another cause of what was found are read beside it, from its first line
    # to the end of that run of the server
    if sightings and not any(s.names_cause for s in sightings):
        first = min(s.evidence[0].number for s in sightings)
        boundary = find(log, _RUN_BOUNDARY, start=first)
        end = boundary[1].lines[0].number if boundary is not None else len(log.lines) + 1
        for view, node, pats, releases, entry in sigs:
            if entry is None or not entry.names_cause:
                continue
            wanted = [(_folded(p.regex), p.description) for p in pats]
            ev = find_in_order(log, wanted, start=first - 1, accepts=[_accept(p) for p in pats])
            if ev and ev[0].number < end and _with(log, entry):
                sightings.append(_sighting(ls, view, node, ev, releases, None, entry))
                break
    # only a failure the log does not show whole is looked for cut short, in the same order:
    # a triage entry that quotes part of a run's signature adds nothing where that one is found
    for group in ([s for s in sigs if s[4] is None], [s for s in sigs if s[4] is not None]):
        for view, node, pats, releases, entry in group if not sightings else ():
            hit = _cut_short(log, pats, checked=entry is not None) if pats else None
            if hit is not None and not _with(log, entry):
                hit = None
            if hit is not None and _stopped(log, entry, hit[0][0].number - 1) is None:
                ev, how = hit
                sightings.append(_sighting(ls, view, node, ev, releases, how, entry))
    return sightings


def _accept(p: Pattern) -> Callable[[dict[str, str]], bool] | None:
    """A triage entry's pattern's checks between two of its captures as a test of a match
    (None: it has none): a line they refuse is not the failure (a store's address that is the
    worker's own). A check against a constant would be one lab's figure, and is not applied; a
    run's signatures are read without their checks, whose figures are their lab's (the advice
    judges a paste's figures)."""
    relational = {}
    for name, check in p.captures.items():
        ops = {
            op: v
            for op, v in check.model_dump(by_alias=True, exclude_none=True).items()
            if isinstance(v, str) and v.startswith("{") and v.endswith("}")
        }
        if ops:
            relational[name] = CaptureCheck.model_validate(ops)
    if not relational:
        return None
    return lambda caps: not check_captures(relational, caps)


# a server's start (uvicorn's lines, which vLLM's and SGLang's servers log): a run begins there,
# which a stop logged before it does not explain
_SERVER_START = r"Application startup complete\.|Started server process \[\d+\]"


# the server or its engine core told to stop by a signal, as vLLM's signal handlers log it
# (vllm/entrypoints/launchers/launcher.py :256, vllm/v1/engine/core.py :1526 in 0.33.0): what
# the same run logs after it, every death and EngineDeadError among it, is the stop's doing
_SIGNALLED = (
    r"\[shutdown\] (?:API server: shutdown triggered"
    r"|EngineCore: trigger received signal=SIG(?:TERM|INT))"
)


def _with(log: Log, entry: TriageSignature | None) -> bool:
    """The log shows what the entry's lines need beside them to count (`only_with`) and no
    line that makes them another failure's (`not_with`), or the entry needs neither."""
    if entry is None:
        return True
    if entry.not_with is not None and find(log, _folded(entry.not_with.regex)) is not None:
        return False
    return entry.only_with is None or find(log, _folded(entry.only_with.regex)) is not None


def _stopped(log: Log, entry: TriageSignature | None, first: int) -> int | None:
    """Where the server was told to stop before line index `first` (a signal; or the entry's
    own stop lines) with no server start between, so that the lines from `first` on are what
    that stop did: the index of the line where the next run starts (the log's end where none
    does), to look on from. None where no such stop comes before `first`."""
    stops = [_SIGNALLED]
    if entry is not None and entry.stopped_by is not None:
        stops.append(_folded(entry.stopped_by.regex))
    for stop in stops:
        last, pos = None, 0
        while (hit := find(log, stop, start=pos)) and hit[1].number - 1 < first:
            last, pos = hit[1].number - 1, hit[0]
        if last is None:
            continue
        started = find(log, _SERVER_START, start=last + 1)
        if started is None or started[1].number - 1 >= first:
            after = find(log, _SERVER_START, start=first)
            return len(log.lines) if after is None else after[1].number - 1
    return None


# the first lines of a run of vLLM's API server (its version; its arguments, 0.6 to 0.33)
_RUN_START = r"vLLM API server version|\bnon-default args: \{|\bargs: Namespace\("


def _warned_then_started(log: Log, ls: LoadedScenario, ev: list[Evidence]) -> bool:
    """A run's signature of a failure that stops the server's start (its phase comes before
    serving) found on a line vLLM's logger logged as a warning, and the server started after
    it in the same run: what the lines warned of did not stop the start. vLLM warns with its
    refusal's words where a variable allows what it refuses (VLLM_ALLOW_LONG_MAX_MODEL_LEN:
    model.py :2677-2678 in 0.33.0)."""
    phase = ls.scenario.expect.phase
    if (
        phase is None
        or _ORDER.index(phase) >= _ORDER.index(StartupPhase.SERVING)
        or _WARNING_LINE.search(ev[0].lines[0].original) is None
    ):
        return False
    after = ev[-1].lines[-1].number
    started = find(log, _SERVER_START, start=after)
    if started is None:
        return False
    # the start of the same run: before the next run's first line
    rerun = find(log, _RUN_START, start=after)
    return rerun is None or started[1].number < rerun[1].number


# vLLM's logger at warning level, as vllm/logger.py's _FORMAT prints it: "WARNING 12-03 10:00:00
# [model.py:2677] " (0.33.0; "(APIServer pid=N) " before it), "WARNING 12-03 10:00:00
# config.py:1796] " (0.6.3); at VLLM_LOGGING_LEVEL=DEBUG the file is a shortened path
# ("[config/model.py:2677]", ".../x.py": logging_utils/formatter.py's use_relpath)
_WARNING_LINE = re.compile(r"\bWARNING \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? \[?[\w./-]+:\d+\] ")


def _after_last(log: Log, pattern: Pattern | None) -> int:
    """The line index after the last match of `pattern` (0 where there is none)."""
    pos = 0
    while pattern is not None and (hit := find(log, _folded(pattern.regex), start=pos)):
        pos = hit[0]
    return pos


def _sighting(
    ls: LoadedScenario,
    view: str,
    node: str,
    ev: list[Evidence],
    releases: str | None,
    cut: str | None = None,
    entry: TriageSignature | None = None,
) -> Sighting:
    pod = next((ln.node for e in ev for ln in e.lines if ln.node), None)
    note = ls.scenario.wordings()[releases].note if releases else None
    if entry is not None:
        note = entry.note
    when = None if entry is None else entry.when
    lacks = entry.cut_before if entry is not None and cut == "before" else None
    recover = tuple(_flat(r) for r in entry.recover) if entry is not None else ()
    shortcuts = tuple(_flat(r) for r in entry.shortcuts) if entry is not None else ()
    wrapper = entry is not None and (entry.cut_before_cause or entry.after_cause)
    names_cause = entry is not None and entry.names_cause
    return Sighting(
        view,
        node,
        pod,
        tuple(ev),
        releases,
        note,
        cut,
        when,
        lacks,
        recover,
        shortcuts,
        wrapper,
        names_cause,
    )


def _cut_short(
    log: Log, pats: list[Pattern], checked: bool = False
) -> tuple[list[Evidence], str] | None:
    """The signature's identifying patterns but the last in order, and the last one's message
    cut short after them (runner.triage.cut); `checked`: a triage entry's, whose checks between
    captures apply to every match, the cut one's included (with what its part shows)."""
    head = find_in_order(
        log,
        [(_folded(p.regex), p.description) for p in pats[:-1]],
        accepts=[_accept(p) for p in pats[:-1]] if checked else (),
    )
    if head is None:
        return None
    start = head[-1].lines[-1].number if head else 0  # the index after the last line
    frame_start = max(head[-1].number - 2, 0) if head else 0
    last = pats[-1].model_copy(update={"regex": _folded(pats[-1].regex)})
    cut = find_cut(log, last, start, frame_start)
    if cut is None:
        return None
    accept = _accept(pats[-1]) if checked else None
    if accept is not None and not accept(cut.evidence.captures):
        return None
    return [*head, cut.evidence], cut.how


def _most_telling(found: list[Finding]) -> list[Finding]:
    """Without a finding whose every line another finding quotes together with more: that one
    explains more of the log (a single engine's death inside a group's whose workers speak too).
    Findings that quote the same lines are both kept: the log alone cannot tell them apart."""

    def numbers(f: Finding) -> set[int]:
        return {e.number for s in f.sightings for e in s.evidence}

    return [f for f in found if not any(numbers(f) < numbers(g) for g in found)]
