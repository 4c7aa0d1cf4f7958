"""One clock for timelines. Container runtimes stamp lines in UTC (`docker logs -t`, `kubectl
logs --timestamps`); vLLM, PyTorch and a host's syslog write the local time of their process with
no zone. Read naively, the DeepGEMM crash write-up's KST host (UTC+9) puts its events 9 hours
after the container's and causality flips. Every line is converted to UTC, with the zone each
source is in stated.

Recognised stamps, at the start of a line:
    2026-04-19T01:59:54.123456789Z ...       RFC 3339 with Z or an offset (runtime stamps)
    2026-04-19 10:59:50 ...                   naive date and time (syslog-like): source's zone
    Apr 19 10:59:50 host ...                  classic syslog: source's zone and year
    (APIServer pid=1) INFO 04-19 10:59:54 ... vLLM: source's zone and year
    [rank1]:[W0419 10:59:54.97 ...]           PyTorch's C++ log: source's zone and year
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from runner.errors import InputError

_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})\s?")
_NAIVE = re.compile(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(\.\d+)?\s")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}:\d{2}:\d{2})\s")
_VLLM = re.compile(
    r"^(?:\([\w:]+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(\d{2})-(\d{2}) (\d{2}:\d{2}:\d{2}) "
)
_TORCH = re.compile(r"^\[rank\d+\]:\[[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2})(\.\d+)?")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}


@dataclass(frozen=True)
class Stamped:
    utc: datetime
    source: str
    zone: str  # the zone the stamp was read in: "stamped" when the line carried its own
    text: str


def _frac(s: str | None) -> int:
    return int((s or ".0")[1:7].ljust(6, "0"))


def line_time(text: str, zone: tzinfo, year: int) -> tuple[datetime, bool] | None:
    """(UTC time, whether the line carried its own zone), or None when it has no stamp."""
    m = _RFC3339.match(text)
    if m:
        # Python 3.11's fromisoformat reads Z, +09:00 and +0900 alike
        dt = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}{m.group(4)}").replace(
            microsecond=_frac(m.group(3))
        )
        return dt.astimezone(UTC), True
    local: datetime | None = None
    if m := _NAIVE.match(text):
        local = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}").replace(
            microsecond=_frac(m.group(3))
        )
    elif (m := _SYSLOG.match(text)) and m.group(1) in _MONTHS:  # "Foo 19 ..." is no stamp
        hh, mm, ss = map(int, m.group(3).split(":"))
        local = datetime(year, _MONTHS[m.group(1)], int(m.group(2)), hh, mm, ss)
    elif m := _VLLM.match(text):
        hh, mm, ss = map(int, m.group(3).split(":"))
        local = datetime(year, int(m.group(1)), int(m.group(2)), hh, mm, ss)
    elif m := _TORCH.match(text):
        hh, mm, ss = map(int, m.group(3).split(":"))
        local = datetime(year, int(m.group(1)), int(m.group(2)), hh, mm, ss, _frac(m.group(4)))
    if local is None:
        return None
    return local.replace(tzinfo=zone).astimezone(UTC), False


def merge(sources: Sequence[tuple[str, str, tzinfo, int]]) -> list[Stamped]:
    """Lines of several logs (name, text, the zone its unzoned stamps are in, year) on one UTC
    timeline. Unstamped lines take the time of the line before them. A stamp that is no date
    (month 13, February 31, hour 25) is an InputError naming the source and line."""
    out: list[Stamped] = []
    for name, text, zone, year in sources:
        last: datetime | None = None
        for number, line in enumerate(text.splitlines(), 1):
            try:
                got = line_time(line, zone, year)
            except (ValueError, OverflowError) as exc:  # 2026-13-45, Feb 31, T25:00Z, year 1
                raise InputError(
                    f"time stamp that is no time: {exc} ({line[:60]!r})",
                    file=name,
                    line=number,
                    hint="fix or remove the line, or give the right --year",
                ) from None
            if got is not None:
                last = got[0]
            if last is None:
                continue
            out.append(Stamped(last, name, "stamped" if got and got[1] else str(zone), line))
    return sorted(out, key=lambda s: s.utc)
