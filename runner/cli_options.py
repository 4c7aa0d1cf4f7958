"""What every `gameday` command shares: the mapping of gameday's errors to exit codes (and of
SIGTERM to an interrupt), and the options several commands take."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from runner import output
from runner.errors import GamedayError

DEFAULT_LAB = Path("inventories/local.yaml")

F = TypeVar("F", bound=Callable[..., Any])


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM (a CI timeout, `kill`) cleans up like Ctrl-C


def handled(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        signal.signal(signal.SIGTERM, _terminate)
        try:
            return fn(*args, **kwargs)
        except GamedayError as exc:
            output.error(exc)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            output.message("interrupted (cleanup ran; `gameday cleanup` undoes anything left)")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


parallel_option = click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Run the scenarios on N isolated instances of the (local or compose) lab at once.",
)
reports_option = click.option(
    "--reports",
    "reports_dir",
    type=click.Path(path_type=Path),
    default=Path("reports"),
    show_default=True,
    help="Where run directories go.",
)
lab_option = click.option(
    "--lab",
    "lab_path",
    type=click.Path(path_type=Path),
    default=DEFAULT_LAB,
    show_default=True,
    help="Inventory of the lab to use.",
)
