"""The seed's trap: container logs in UTC, the host in KST (UTC+9). Read naively the host's
memory errors land 9 hours after the crash; on one UTC clock they are 18 hours before it."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from runner.timestamps import line_time, merge

ROOT = Path(__file__).resolve().parents[3]
KST = ZoneInfo("Asia/Seoul")

CONTAINER = """\
2026-04-19T01:59:50.100000000Z (EngineCore pid=81) ERROR 04-19 01:59:50 [core.py:935] EngineCore encountered a fatal error.
2026-04-19T01:59:50.200000000Z (APIServer pid=1) INFO:     Finished server process [1]
"""
HOST = """\
2026-04-18 17:02:11 kernel: NVRM: nvAssertOkFailedNoLog: NV_ERR_NO_MEMORY
2026-04-19 10:59:49 dockerd: container vllm_glm53 health status: healthy
2026-04-19 11:05:00 cron: daily backup started
"""


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


def test_cli(tmp_path: Path) -> None:
    (tmp_path / "c.log").write_text(CONTAINER)
    (tmp_path / "h.log").write_text(HOST)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "timeline",
            str(tmp_path / "c.log"),
            f"{tmp_path / 'h.log'}@Asia/Seoul",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "healthy" in lines[1] and "fatal error" in lines[2]
    bad = subprocess.run(
        [sys.executable, "-m", "runner.cli", "timeline", f"{tmp_path / 'h.log'}@Mars/Olympus"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "unknown time zone" in bad.stderr
