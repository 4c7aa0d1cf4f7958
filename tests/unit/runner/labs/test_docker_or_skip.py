"""The e2e tests skip for want of a Docker engine only when there is none (tests/support/cli)."""

from __future__ import annotations

import pytest

from tests.support.cli import no_engine


def _chained(inner: BaseException) -> BaseException:
    """docker's error over requests' over urllib3's, the OS error among the last one's args."""
    try:
        try:
            try:
                raise ConnectionError("Connection aborted.", inner)
            except ConnectionError as exc:
                raise OSError("HTTPConnectionPool: max retries") from exc
        except OSError as exc:
            raise RuntimeError("Error while fetching server API version") from exc
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize(
    ("inner", "none"),
    [
        (FileNotFoundError(2, "No such file or directory"), True),  # no socket
        (ConnectionRefusedError(111, "Connection refused"), True),  # nothing listening
        (PermissionError(13, "Permission denied"), False),  # an engine this user may not use
        (TimeoutError("timed out"), False),
    ],
)
def test_no_engine_only_for_a_missing_or_refusing_socket(inner: BaseException, none: bool) -> None:
    assert no_engine(_chained(inner)) is none
