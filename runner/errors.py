"""gameday's exceptions. Third-party errors are mapped to these at the boundary where they occur
(`raise ... from exc`); the CLI maps these to exit codes and prints them. The library never exits.

    GamedayError
    ├── InputError            exit 2   bad scenario, inventory or arguments: file, line, field, hint
    │   ├── ScenarioError
    │   └── InventoryError
    └── LabError              exit 3   the lab cannot do what was asked (not up, port in use, ...)
        ├── LabNotUp
        └── LeftoversError    a previous run left changes behind: `gameday cleanup` first

An assertion that does not hold is not an exception: it is a verdict in the results (exit 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


class GamedayError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")


class InputError(GamedayError):
    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: Path | str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = ""
        if file is not None:
            where = f"{file}" + (f":{line}" if line else "")
        if field:
            where += f" [{field}]" if where else f"[{field}]"
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field


class ScenarioError(InputError):
    pass


class InventoryError(InputError):
    pass


class LabError(GamedayError):
    exit_code = 3


class LabNotUp(LabError):
    pass


class LeftoversError(LabError):
    pass


_LIBRARY_PREFIXES = ("Value error, ", "Assertion failed, ")


def plain_message(err: Mapping[str, Any]) -> str:
    """A pydantic error's message as a person reads it: a validator's own words without the
    "Value error, " pydantic puts before them."""
    ctx = err.get("ctx") or {}
    if err.get("type") in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    msg = str(err.get("msg", ""))
    for prefix in _LIBRARY_PREFIXES:
        msg = msg.removeprefix(prefix)
    return msg
