"""The DeepGEMM crash write-up's trap: container logs in UTC, the host in KST (UTC+9). Read
naively the host's memory errors land 9 hours after the crash; on one UTC clock they are 18 hours
before it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from runner.cli.timestamps import line_time, merge
from runner.errors import InputError
from tests.support.seedlogs import CONTAINER, HOST

KST = ZoneInfo("Asia/Seoul")


def test_each_stamp_kind() -> None:
    assert line_time("2026-04-19T01:59:50.5Z x", KST, 2026) == (
        datetime(2026, 4, 19, 1, 59, 50, 500000, tzinfo=UTC),
        True,
    )
    assert line_time("2026-04-19T10:59:50+09:00 x", UTC, 2026) == (
        datetime(2026, 4, 19, 1, 59, 50, tzinfo=UTC),
        True,
    )
    assert line_time("(APIServer pid=1) INFO 04-19 10:45:24 [x.py:1] y", KST, 2026) == (
        datetime(2026, 4, 19, 1, 45, 24, tzinfo=UTC),
        False,
    )
    assert line_time("Apr 19 10:59:50 node1 kernel: z", KST, 2026) == (
        datetime(2026, 4, 19, 1, 59, 50, tzinfo=UTC),
        False,
    )
    got = line_time("[rank1]:[W0419 10:59:54.971184476 ProcessGroupNCCL.cpp:1826] w", KST, 2026)
    assert got is not None and got[0] == datetime(2026, 4, 19, 1, 59, 54, 971184, tzinfo=UTC)
    assert line_time("no stamp here", UTC, 2026) is None


def test_kst_host_and_utc_container_in_causal_order() -> None:
    naive = merge([("container", CONTAINER, UTC, 2026), ("host", HOST, UTC, 2026)])
    right = merge([("container", CONTAINER, UTC, 2026), ("host", HOST, KST, 2026)])

    def index(timeline: list, needle: str) -> int:  # type: ignore[type-arg]
        return next(i for i, s in enumerate(timeline) if needle in s.text)

    # read naively, the host's "healthy" comes 9 hours after the crash
    assert index(naive, "healthy") > index(naive, "fatal error")
    assert index(right, "healthy") < index(right, "fatal error")
    assert [s.source for s in right] == ["host", "host", "container", "container", "host"]
    assert "NV_ERR_NO_MEMORY" in right[0].text  # 18 hours before the crash, not after it
    assert (right[2].utc - right[0].utc).total_seconds() > 8 * 3600
    assert right[1].zone == "Asia/Seoul" and right[2].zone == "stamped"


# ---- every stamp kind at its edges -------------------------------------------------------------

NY = ZoneInfo("America/New_York")  # UTC-4 in April


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2026-04-19T01:59:50Z x", utc(2026, 4, 19, 1, 59, 50)),
        ("2026-04-19T01:59:50Z", utc(2026, 4, 19, 1, 59, 50)),  # nothing after the stamp
        ("2026-04-19T01:59:50.5Z x", utc(2026, 4, 19, 1, 59, 50, 500000)),
        ("2026-04-19T01:59:50.000001Z x", utc(2026, 4, 19, 1, 59, 50, 1)),
        ("2026-04-19T01:59:50.1234567Z x", utc(2026, 4, 19, 1, 59, 50, 123456)),  # truncated
        ("2026-04-19T10:59:50+09:00 x", utc(2026, 4, 19, 1, 59, 50)),
        ("2026-04-19T10:59:50+0900 x", utc(2026, 4, 19, 1, 59, 50)),  # no colon in the offset
        ("2026-04-19T10:59:50.25+0900 x", utc(2026, 4, 19, 1, 59, 50, 250000)),
        ("2026-04-18T20:29:50-0530 x", utc(2026, 4, 19, 1, 59, 50)),
        ("2026-04-18T20:29:50-05:30 x", utc(2026, 4, 19, 1, 59, 50)),
    ],
)
def test_stamped_lines(line: str, expected: datetime) -> None:
    assert line_time(line, NY, 2026) == (expected, True)  # the line's own zone wins


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2026-04-19 10:59:50 x", utc(2026, 4, 19, 14, 59, 50)),
        ("2026-04-19T10:59:50 x", utc(2026, 4, 19, 14, 59, 50)),
        ("2026-04-19 10:59:50.75 x", utc(2026, 4, 19, 14, 59, 50, 750000)),
        ("Apr 19 10:59:50 host k", utc(2026, 4, 19, 14, 59, 50)),
        ("Apr  9 10:59:50 host k", utc(2026, 4, 9, 14, 59, 50)),  # syslog pads the day
        ("INFO 04-19 10:59:54 [x.py:1] y", utc(2026, 4, 19, 14, 59, 54)),
        ("(APIServer pid=1) DEBUG 04-19 10:59:54 y", utc(2026, 4, 19, 14, 59, 54)),
        ("(EngineCore_DP0 pid=90) WARNING 04-19 10:59:54 y", utc(2026, 4, 19, 14, 59, 54)),
        ("(EngineCore pid=81) ERROR 04-19 10:59:54 y", utc(2026, 4, 19, 14, 59, 54)),
        ("CRITICAL 04-19 10:59:54 y", utc(2026, 4, 19, 14, 59, 54)),
        ("[rank0]:[I0419 10:59:54 x.cpp:1] w", utc(2026, 4, 19, 14, 59, 54)),
        ("[rank12]:[E0419 10:59:54.5 x.cpp:1] w", utc(2026, 4, 19, 14, 59, 54, 500000)),
        ("[rank1]:[F0419 10:59:54.971184476 x] w", utc(2026, 4, 19, 14, 59, 54, 971184)),
    ],
)
def test_unzoned_lines_in_the_sources_zone(line: str, expected: datetime) -> None:
    assert line_time(line, NY, 2026) == (expected, False)


@pytest.mark.parametrize(
    ("word", "month"),
    [
        ("Jan", 1),
        ("Feb", 2),
        ("Mar", 3),
        ("Apr", 4),
        ("May", 5),
        ("Jun", 6),
        ("Jul", 7),
        ("Aug", 8),
        ("Sep", 9),
        ("Oct", 10),
        ("Nov", 11),
        ("Dec", 12),
    ],
)
def test_every_syslog_month(word: str, month: int) -> None:
    assert line_time(f"{word} 28 12:00:00 h", UTC, 2025) == (utc(2025, month, 28, 12), False)


@pytest.mark.parametrize(
    "line",
    [
        "Foo 19 10:59:50 host k",  # a word that is no month: no stamp, not January
        "Run 3 12:00:00 finished",
        "no stamp here",
        "",
        "2026-04-19 10:59:50",  # a naive stamp needs the space that ends it
        "INFO 04-19 10:59:54",  # so does vLLM's
        "TRACE 04-19 10:59:54 y",
        "[rank0]:[X0419 10:59:54 x] w",
        " 2026-04-19T01:59:50Z indented",
    ],
)
def test_no_stamp(line: str) -> None:
    assert line_time(line, UTC, 2026) is None


def test_merge_carries_times_and_zones() -> None:
    host = "orphan before any stamp\nApr 19 10:59:50 h a\ncontinued\nApr 19 10:59:40 h b\n"
    box = "2026-04-19T01:59:45Z c\n  traceback line\n"
    got = merge([("host", host, KST, 2026), ("box", box, NY, 2026)])
    assert [(s.utc, s.source, s.zone, s.text) for s in got] == [
        (utc(2026, 4, 19, 1, 59, 40), "host", "Asia/Seoul", "Apr 19 10:59:40 h b"),
        (utc(2026, 4, 19, 1, 59, 45), "box", "stamped", "2026-04-19T01:59:45Z c"),
        (utc(2026, 4, 19, 1, 59, 45), "box", "America/New_York", "  traceback line"),
        (utc(2026, 4, 19, 1, 59, 50), "host", "Asia/Seoul", "Apr 19 10:59:50 h a"),
        (utc(2026, 4, 19, 1, 59, 50), "host", "Asia/Seoul", "continued"),
    ]


@pytest.mark.parametrize(
    ("text", "year", "line"),
    [
        ("2026-04-19 10:00:00 ok\n2026-13-45 10:00:00 bad\n", 2026, 2),
        ("ok\nFeb 31 10:00:00 h x\n", 2026, 2),
        ("2026-04-19T25:00:00Z x\n", 2026, 1),
        ("x\ny\n04-00 10:00:00\nINFO 02-30 10:00:00 z\n", 2026, 4),
        ("Jan  1 00:00:00 h x\n", 1, 1),  # in KST, before the first UTC time there is
    ],
)
def test_a_stamp_that_is_no_date(text: str, year: int, line: int) -> None:
    with pytest.raises(InputError) as err:
        merge([("host.log", text, KST, year)])
    assert (err.value.file, err.value.line) == ("host.log", line)
    assert str(err.value).startswith(f"host.log:{line}: time stamp that is no time: ")
    assert err.value.hint == "fix or remove the line, or give the right --year"


def test_a_stamp_that_is_no_date_quotes_the_line_start() -> None:
    line = "2026-13-45 10:00:00 " + "x" * 80
    with pytest.raises(InputError) as err:
        merge([("h", line, UTC, 2026)])
    assert err.value.message == (  # the first 60 characters: the stamp and 40 x
        "h:1: time stamp that is no time: month must be in 1..12 "
        f"('2026-13-45 10:00:00 {'x' * 40}')"
    )


def test_stamped_is_frozen() -> None:
    [s] = merge([("h", "2026-04-19T01:59:50Z x", UTC, 2026)])
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.text = "y"  # type: ignore[misc]
